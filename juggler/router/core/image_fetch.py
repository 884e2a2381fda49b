"""Images given by http(s) URL (issue 51): fetched by the router, where the admin
allows it (`image_url_fetch`), with a size cap and a timeout, and handed to the backend
as data URLs. Off by default: a server that fetches what a client names can be made to
reach hosts the client cannot (the admin turns it on knowingly).

The body's image parts are found in OpenAI chat `messages` (`image_url` parts) and in
the Responses API's `input` (`input_image` parts); each is replaced in place.
"""

from __future__ import annotations

import asyncio
import mimetypes
from collections.abc import Iterator
from typing import Any

import httpx

from juggler.api import media
from juggler.config import Settings
from juggler.errors import BadRequest


def _image_parts(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("messages", "input"):
        items = body.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            content = item.get("content") if isinstance(item, dict) else None
            if not isinstance(content, list):
                continue
            for part in content:
                if isinstance(part, dict) and part.get("type") in media.IMAGE_PARTS:
                    yield part


def _set_url(part: dict[str, Any], url: str) -> None:
    if isinstance(part.get("image_url"), dict):
        part["image_url"]["url"] = url
    else:
        part["image_url"] = url


async def inline_images(body: dict[str, Any], settings: Settings) -> None:
    """Replace every http(s) image URL of `body` by a data URL of what it names;
    BadRequest when fetching is off, or an image is too large, late or unreachable."""
    remote = [
        p
        for p in _image_parts(body)
        if isinstance(media.part_url(p), str) and media.part_url(p).startswith(("http:", "https:"))
    ]
    if not remote:
        return
    if not settings.image_url_fetch:
        raise BadRequest(
            "image URLs are not fetched by this server (the admin setting image_url_fetch "
            "is off); send the image as a data: URL (base64)",
            param="messages",
        )
    async with httpx.AsyncClient(timeout=settings.image_url_timeout_s) as client:
        urls = await asyncio.gather(
            *(fetch(client, str(media.part_url(p)), settings) for p in remote)
        )
    for part, url in zip(remote, urls, strict=True):
        _set_url(part, url)


async def fetch(client: httpx.AsyncClient, url: str, settings: Settings) -> str:
    """The image at `url` as a data URL, read up to `image_url_max_bytes`."""
    limit = settings.image_url_max_bytes
    try:
        async with asyncio.timeout(settings.image_url_timeout_s):
            async with client.stream("GET", url, follow_redirects=False) as r:
                if r.status_code != 200:
                    raise BadRequest(
                        f"the image at {url[:200]} answered {r.status_code}", param="messages"
                    )
                chunks: list[bytes] = []
                size = 0
                async for chunk in r.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise BadRequest(
                            f"the image at {url[:200]} is larger than {limit} bytes "
                            "(image_url_max_bytes)",
                            param="messages",
                        )
                    chunks.append(chunk)
                mime = r.headers.get("content-type", "").split(";")[0].strip()
    except TimeoutError:
        raise BadRequest(
            f"the image at {url[:200]} did not arrive within {settings.image_url_timeout_s} s",
            param="messages",
        ) from None
    except httpx.HTTPError as exc:
        raise BadRequest(
            f"the image at {url[:200]} could not be fetched: {exc}", param="messages"
        ) from None
    mime = mime or mimetypes.guess_type(url)[0] or "application/octet-stream"
    return media.data_url(mime, b"".join(chunks))
