"""Images in chat messages (issue 51): the one internal form every dialect turns its
images into, an OpenAI `image_url` content part, and what reads it.

Router and backend share it. A message's text (`ChatMessage.text`) holds a slot where
each image was, the image's URL inside (`slot`), so the image travels with the text
through every path that renders messages (chat templates, sessions, the Responses
API); the backend puts the projector's marker there and reads the images, in order,
from the slots (`slots_of`). Data URLs only reach a backend: the router turns an
allowed http(s) URL into one (`router.core.image_fetch`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any

#: How an image's slot in a message's text begins (a user's text cannot hold it).
IMAGE_SLOT = "\x00juggler-image:"
SLOT_RE = re.compile("\x00juggler-image:([^\x00]*)\x00")
#: The content part types that carry an image (OpenAI chat; Responses' input_image).
IMAGE_PARTS = frozenset({"image_url", "input_image"})
#: Image bytes at most, after base64 (setting-free; the body limit is the router's).
MAX_IMAGE_BYTES = 20 * 1024 * 1024


def check_image_part(part: dict[str, Any]) -> None:
    """Raise ValueError unless `part` is a well-formed image part."""
    url = part_url(part)
    if not isinstance(url, str) or not url:
        raise ValueError("an image part needs image_url.url (a data: or http(s) URL)")
    if "\x00" in url or not url.startswith(("data:", "http://", "https://")):
        raise ValueError("image_url.url must be a data: URL or an http(s) URL")
    extra = set(part) - {"type", "image_url", "detail", "file_id"}
    if extra:
        raise ValueError(f"unknown fields in an image part: {sorted(extra)}")


def slot(url: str) -> str:
    """The text that stands for an image in a message's text."""
    return f"{IMAGE_SLOT}{url}\x00"


def slots_of(text: str) -> list[str]:
    """The image URLs of a rendered text's slots, in order."""
    return SLOT_RE.findall(text)


def without_images(text: str) -> tuple[str, int]:
    """A message's text less its image slots, and how many there were: what its text
    costs is not its images' URLs (a data URL is tens of thousands of characters)."""
    if IMAGE_SLOT not in text:
        return text, 0
    return SLOT_RE.subn("", text)


def part_url(part: dict[str, Any]) -> Any:
    """The URL of an image part: OpenAI chat's `image_url.url` (or a bare string, as
    the Responses API writes `image_url`)."""
    value = part.get("image_url")
    if isinstance(value, dict):
        return value.get("url")
    return value


def image_urls(contents: Iterable[Any]) -> list[str]:
    """Every image URL of these message contents, in order."""
    out: list[str] = []
    for content in contents:
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                    out.append(str(part_url(part)))
    return out


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_part(url: str) -> dict[str, Any]:
    """The internal form of one image."""
    return {"type": "image_url", "image_url": {"url": url}}


def bytes_of(url: str) -> bytes:
    """The bytes of a base64 data URL; ValueError when it is not one."""
    if not url.startswith("data:"):
        raise ValueError("only data: URLs reach the model (http(s) images are fetched first)")
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ValueError("an image data URL must be base64 (data:image/png;base64,...)")
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ValueError(f"an image is larger than {MAX_IMAGE_BYTES >> 20} MiB")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("an image's base64 data is not valid") from None


def from_base64(text: str) -> str:
    """A bare base64 image (Ollama's `images`, Anthropic's `source.data`) as a data URL;
    the type is read from the bytes later, so a generic one is named here."""
    if text.startswith("data:"):
        return text
    return f"data:application/octet-stream;base64,{text}"
