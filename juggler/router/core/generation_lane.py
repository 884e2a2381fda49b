"""The router's generation routes, in front of FastAPI's routing (issue 47).

Nearly every request a router serves is a generation: OpenAI's chat and completions,
Anthropic's messages, Ollama's chat and generate. Through FastAPI each one crossed its
exception middleware, the route table (a hundred routes, matched in order), the
request-response wrapper and the dependency solver before its handler ran, and its
answer crossed them again: about a sixth of the router's own time for a request on a
fast device. `GenerationLane` sits inside the router's middleware (request id, browser
guard, CORS, keys, body limit: all of it still applies) and calls these routes' handlers
itself, with FastAPI's rules for their outcomes: a `JugglerError` is its JSON error in
the route's shape (`on_error`, the app's own handler), a client that left gets 499, a
value that is not a Response is JSON as FastAPI would encode it, and anything else
propagates to the request-id middleware's 500, as before. Every other request, other
methods on these paths included (405 with Allow), goes to FastAPI.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi.encoders import jsonable_encoder
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from juggler.errors import JugglerError

log = logging.getLogger("juggler.router")

#: A generation route's handler, as FastAPI calls it.
Handler = Callable[[Request], Awaitable[Any]]


class GenerationLane:
    """ASGI middleware: `POST` on a path of `routes` runs its handler directly."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Mapping[str, Handler],
        on_error: Callable[[Request, JugglerError], Response],
        gone: type[Exception],
    ) -> None:
        self.app = app
        self.routes = dict(routes)
        self.on_error = on_error
        self.gone = gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = None
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.routes.get(scope["path"])
        if handler is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            answer = await handler(request)
        except JugglerError as exc:
            if exc.status >= 500:
                log.warning("POST %s -> %d %s", scope["path"], exc.status, exc.message)
            response = self.on_error(request, exc)
        except Exception as exc:
            if not isinstance(exc, self.gone):
                raise
            log.info("POST %s: client went away; backend request closed", scope["path"])
            response = Response(status_code=499)  # nginx's "client closed request"
        else:
            if isinstance(answer, Response):
                response = answer
            else:
                response = JSONResponse(jsonable_encoder(answer))
        await response(scope, receive, send)


def generation_routes(
    prefixes: tuple[str, ...], per_prefix: Mapping[str, Handler], bare: Mapping[str, Handler]
) -> dict[str, Handler]:
    """Every path of the lane: each of `per_prefix` under every prefix, and `bare`."""
    routes = {prefix + path: h for prefix in prefixes for path, h in per_prefix.items()}
    return {**routes, **bare}
