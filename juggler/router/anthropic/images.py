"""Anthropic's `image` content blocks as OpenAI image parts (issue 51): a base64
`source` (`media_type` image/jpeg, image/png, image/gif or image/webp) becomes a data
URL; a `url` source an image URL (fetched by the router where the admin allows it)."""

from __future__ import annotations

from typing import Any

from juggler.api import media
from juggler.errors import BadRequest

MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def image_part_of(param: str, block: Any) -> dict[str, Any]:
    """The OpenAI image part of an Anthropic image block; BadRequest naming `param`."""
    extra = getattr(block, "model_extra", None) or {}
    source = extra.get("source")
    if not isinstance(source, dict):
        raise BadRequest(f"{param}.source: an image block needs a source", param=f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        mime, data = source.get("media_type"), source.get("data")
        if mime not in MEDIA_TYPES:
            raise BadRequest(
                f"{param}.source.media_type: one of {', '.join(sorted(MEDIA_TYPES))}",
                param=f"{param}.source.media_type",
            )
        if not isinstance(data, str) or not data:
            raise BadRequest(f"{param}.source.data: base64 image data", param=f"{param}.source")
        return media.image_part(f"data:{mime};base64,{data}")
    if kind == "url" and isinstance(source.get("url"), str):
        return media.image_part(source["url"])
    raise BadRequest(
        f"{param}.source.type: base64 or url (files are not stored here)",
        param=f"{param}.source.type",
    )


def joined(items: list[Any]) -> Any:
    """A turn's text blocks (str) and images (parts) as one content: the text joined
    by blank lines when there is no image, else OpenAI parts in order."""
    if all(isinstance(i, str) for i in items):
        return "\n\n".join(items)
    parts: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            sep = "\n\n" if parts and parts[-1].get("type") == "text" else ""
            parts.append({"type": "text", "text": sep + item})
        else:
            parts.append(item)
    return parts
