"""Server-sent events framing, the one writer of `data:` / `event:` lines."""

from __future__ import annotations

import json
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
