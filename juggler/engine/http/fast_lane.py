"""The backend's generation routes, in front of FastAPI (issue 47).

`POST /v1/completions` and `POST /v1/chat/completions` carry nearly every request a
backend serves. Through FastAPI each one crossed its middleware stack, its dependency
solver, `jsonable_encoder` and `json.dumps`: about as much host time as prefilling and
decoding a short answer on a fast device. `FastLane` answers these two routes itself,
with the same rules: the body is validated by the models the router shares
(`juggler.api.openai`), a bad field is a 400 naming it, a `JugglerError` is its JSON
error (`error_response`, also FastAPI's handler for every other route), anything else a
500 in OpenAI's shape; an answer goes out as orjson bytes. Every other request, and the
lifespan, go to the FastAPI app.

A small request (`INLINE_BODY_BYTES`, no grammar to build) is prepared on the event loop:
rendering and tokenizing it takes well under a millisecond, less than the hop to a
thread. Larger or constrained ones are still prepared in a thread (issue 27).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from juggler.errors import BadRequest, EngineError, JugglerError, render
from juggler.options import bad_request_of

log = logging.getLogger(__name__)

#: Bodies up to this size without a grammar are prepared on the event loop.
INLINE_BODY_BYTES = 4096

M = TypeVar("M", bound=BaseModel)
#: A route: the request and its raw body -> a dict (sent as JSON) or a Response.
Route = Callable[[Request, bytes], Awaitable[Any]]


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(obj), status, headers, media_type="application/json")


def error_response(exc: JugglerError) -> Response:
    """A JugglerError as its JSON body and status (with Retry-After when it has one)."""
    retry_after = getattr(exc, "retry_after_s", None)
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else None
    return json_response(render(exc), exc.status, headers)


def parse(raw: bytes, model: type[M]) -> M:
    """The body as `model`, or a 400 naming the first bad field (as FastAPI's handler
    does for every other route)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise bad_request_of(exc.errors()[0]) from None


def is_small(raw: bytes, *constraints: object) -> bool:
    """Whether a request is prepared on the event loop: a small body asking for no
    grammar (none of `constraints` set)."""
    return len(raw) <= INLINE_BODY_BYTES and not any(c for c in constraints)


class FastLane:
    def __init__(self, app: ASGIApp, routes: Mapping[str, Route]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            answer = await route(request, await request.body())
            response = answer if isinstance(answer, Response) else json_response(answer)
        except JugglerError as exc:
            response = error_response(exc)
        except Exception as exc:
            log.exception("%s failed", scope["path"])
            response = error_response(EngineError(f"internal error: {type(exc).__name__}"))
        await response(scope, receive, send)
