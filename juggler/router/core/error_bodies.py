"""Error bodies in the shape of the face a request is for.

OpenAI's shape (`errors.render`, with the request's id) unless a dialect claims the
request's path: the app registers Ollama's and Anthropic's (`router/app.py`), so that
this package knows no face. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from juggler.errors import JugglerError, render

#: A dialect's error body: (the error, the request's id or "") -> the JSON body.
ErrorBody = Callable[[JugglerError, str], dict[str, Any]]
#: Whether a path belongs to a dialect.
PathTest = Callable[[str], bool]


def openai_body(exc: JugglerError, request_id: str) -> dict[str, Any]:
    """OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the id."""
    body = render(exc)
    if request_id:
        body["error"]["request_id"] = request_id
    return body


class ErrorBodies:
    """Path -> error body: the first dialect that claims the path words it, else OpenAI."""

    def __init__(self, dialects: Sequence[tuple[PathTest, ErrorBody]] = ()) -> None:
        self.dialects = tuple(dialects)

    def __call__(self, exc: JugglerError, request_id: str, path: str) -> dict[str, Any]:
        for claims, body in self.dialects:
            if claims(path):
                return body(exc, request_id)
        return openai_body(exc, request_id)
