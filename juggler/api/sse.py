"""Server-sent events framing, the one writer of `data:` / `event:` lines."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from juggler.errors import JugglerError, render

#: OpenAI's end-of-stream marker.
DONE = b"data: [DONE]\n\n"


def data(obj: Any) -> bytes:
    """One `data: <json>` event."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def event(name: str, obj: Any) -> bytes:
    """One named event (`event: progress` ...), as Lemonade's pull stream sends them."""
    return f"event: {name}\ndata: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def error(exc: JugglerError) -> bytes:
    """An error inside a stream, in OpenAI's error shape."""
    return data(render(exc))


async def read_data(chunks: AsyncIterator[bytes]) -> AsyncGenerator[dict[str, Any], None]:
    """The JSON objects of a stream's `data:` lines, up to `data: [DONE]` (the reading
    side of the framing above)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            for line in frame.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                item = json.loads(payload)
                if isinstance(item, dict):
                    yield item
