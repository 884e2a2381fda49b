"""Server-sent events framing, the one writer of `data:` / `event:` lines."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from juggler.errors import JugglerError, render

#: OpenAI's end-of-stream marker.
DONE = b"data: [DONE]\n\n"
#: The heartbeat comment a silent stream gets (`router.core.heartbeat`, and a backend
#: writing a handed-over stream, `engine.http.handoff`).
PING = b": ping\n\n"
#: What `read_data` yields for the router's heartbeat comment (`: ping`), for a dialect
#: that has a word of its own for it (`router.core.heartbeat`).
PING_EVENT: dict[str, Any] = {"object": "juggler.ping"}


def dumps(obj: Any) -> bytes:
    """Compact JSON as UTF-8 (orjson: a streamed token's event is made in microseconds);
    what orjson cannot write (an integer past 64 bits) goes through `json`."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def data(obj: Any) -> bytes:
    """One `data: <json>` event."""
    return b"data: " + dumps(obj) + b"\n\n"


def event(name: str, obj: Any) -> bytes:
    """One named event (`event: progress` ...), as Lemonade's pull stream sends them."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"


#: Where `Template`'s one varying string goes in the object it is made from.
SLOT = "\x00juggler-slot\x00"


class Template:
    """A `data:` event in which one string varies (a streamed token's text): the bytes
    around that string are made once, and each event is those bytes around the string's
    JSON, byte for byte what `data` writes for the whole object."""

    def __init__(self, obj: Any) -> None:
        slot = orjson.dumps(SLOT)
        head, sep, tail = data(obj).partition(slot)
        if not sep or slot in tail:
            raise ValueError("a template holds its slot exactly once")
        self.head, self.tail = head, tail

    def __call__(self, text: str) -> bytes:
        return self.head + orjson.dumps(text) + self.tail


def error(exc: JugglerError) -> bytes:
    """An error inside a stream, in OpenAI's error shape."""
    return data(render(exc))


async def read_data(chunks: AsyncIterator[bytes]) -> AsyncGenerator[dict[str, Any], None]:
    """The JSON objects of a stream's `data:` lines, up to `data: [DONE]` (the reading
    side of the framing above); `PING_EVENT` for a `: ping` comment."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            for line in frame.split(b"\n"):
                if not line.startswith(b"data:"):
                    if line == b": ping":
                        yield PING_EVENT
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                item = json.loads(payload)
                if isinstance(item, dict):
                    yield item
