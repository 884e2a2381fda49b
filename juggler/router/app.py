"""Build the router's FastAPI app: every face's routes (OpenAI's and Lemonade's under
/api/v1 and /v1, Ollama's under /api, ...), the middleware, and which error shape each
path answers in.

The app owns one Manager (residency), one Proxy (HTTP client to backends) and the
router's state (`core/deps.RouterState`); they live on `app.state.juggler` for the app's
lifetime. Every error, expected or not, leaves as JSON with the request's id: in OpenAI's
shape (`errors.render`), or on Ollama's and Anthropic's routes in theirs
(`ERROR_BODIES`); nothing answers in plain text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from juggler import __version__
from juggler.api.limits import configure_limits
from juggler.config import Settings, juggler_home
from juggler.errors import BadRequest, JugglerError, NotFound
from juggler.logbook import LogBook, RingHandler
from juggler.manager.manager import Manager
from juggler.registry.adapters import AdapterBook
from juggler.registry.catalog import Registry
from juggler.router.anthropic import routes as anthropic_routes
from juggler.router.anthropic.wire import error_body as anthropic_error
from juggler.router.anthropic.wire import is_anthropic_path
from juggler.router.core.adapters import Adapters
from juggler.router.core.browser_guard import BrowserGuard, BrowserGuardMiddleware
from juggler.router.core.deps import RouterState
from juggler.router.core.drain import Drain
from juggler.router.core.error_bodies import ErrorBodies
from juggler.router.core.figures import FiguresPoller
from juggler.router.core.generation_lane import GenerationLane, generation_routes
from juggler.router.core.middleware import (
    OPEN_PATHS,
    AuthMiddleware,
    BodyLimitMiddleware,
    RequestIdMiddleware,
    request_id_of,
)
from juggler.router.core.openapi import allowed_methods, document_request_bodies
from juggler.router.core.pins import PinBook
from juggler.router.core.proxy import ClientGone, Proxy
from juggler.router.dashboard import routes as ui_routes
from juggler.router.gateway import adapter_routes, metrics_route
from juggler.router.lemonade import (
    admin_routes,
    alias_routes,
    config_routes,
    llamacpp_routes,
    logs_route,
    memory_routes,
    model_options,
    model_routes,
    system_routes,
)
from juggler.router.ollama import create as ollama_create
from juggler.router.ollama import models as ollama_models
from juggler.router.ollama import routes as ollama_routes
from juggler.router.ollama.wire import error_body as ollama_error
from juggler.router.ollama.wire import is_ollama_path
from juggler.router.openai import responses, sessions
from juggler.router.openai import routes as openai_routes

log = logging.getLogger("juggler.router")
API_PREFIXES = ("/api/v1", "/v1")
#: Loggers whose records the dashboard's Logs page shows as `router` (not the access log).
LOGGERS = ("juggler", "uvicorn.error")


async def _warm_up(manager: Manager, name: str | None, pins: PinBook) -> None:
    """At start: the pinned models of the last run, then the default model."""
    await pins.restore(manager)
    if not name:
        return
    try:
        await manager.load(name)
        log.info("default model %s is loaded", name)
    except JugglerError as exc:
        log.error("could not load the default model %s: %s", name, exc.message)


#: A route's error, by path: Ollama's routes answer `{"error": "message"}`, Anthropic's
#: in Anthropic's shape, every other route in OpenAI's.
ERROR_BODIES = ErrorBodies(((is_ollama_path, ollama_error), (is_anthropic_path, anthropic_error)))
#: The middleware's refusals, before any route runs (a missing key, a body too large):
#: Anthropic's shape on its routes, OpenAI's on the others (Ollama's included).
EARLY_ERROR_BODIES = ErrorBodies(((is_anthropic_path, anthropic_error),))


def error_response(
    request: Request, exc: JugglerError, extra_headers: dict[str, str] | None = None
) -> JSONResponse:
    """The one place a router error becomes a response, in its route's shape
    (`ERROR_BODIES`)."""
    body = ERROR_BODIES(exc, request_id_of(request.scope), request.url.path)
    headers = dict(extra_headers or {})
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    return JSONResponse(body, status_code=exc.status, headers=headers)


def create_app(settings: Settings, registry: Registry | None = None) -> FastAPI:
    """The router app. `app.state.drain` is its graceful drain: whoever runs the app
    calls `drain.begin(loop)` when asked to stop (see `juggler serve`)."""
    registry = registry or Registry()
    registry.model_dirs = settings.model_dirs  # their GGUFs are models (registry.folders)
    drain = Drain(settings.drain_timeout)
    configure_limits(max_inputs=settings.max_inputs, max_messages=settings.max_messages)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        logs = LogBook()
        handler = RingHandler(logs)
        for name in LOGGERS:
            logging.getLogger(name).addHandler(handler)
        pins = PinBook(juggler_home() / "pins.json")
        manager = Manager(settings, registry, saved_options=pins.saved_options, logbook=logs)
        await manager.start()
        proxy = Proxy(
            manager,
            drain,
            max_waiting=settings.max_queued_requests,
            queue_timeout_s=settings.queue_timeout_s,
            ping_interval_s=settings.sse_ping_interval_s,
        )
        figures = FiguresPoller(manager.snapshot, proxy.pool)
        proxy.on_activity = figures.note_activity
        figures.start()
        adapters = Adapters(settings, registry, AdapterBook())
        app.state.juggler = RouterState(
            settings, registry, manager, proxy, pins, figures, adapters, logs=logs
        )
        app.state.juggler.sessions.limit = settings.max_sessions
        warmup = asyncio.create_task(_warm_up(manager, settings.model, pins))
        try:
            yield
        finally:
            if not warmup.done():
                warmup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await warmup
            await figures.stop()
            await proxy.aclose()
            await manager.stop()
            for name in LOGGERS:
                logging.getLogger(name).removeHandler(handler)

    app = FastAPI(title="Juggler", version=__version__, lifespan=lifespan)
    app.state.drain = drain
    for prefix in API_PREFIXES:
        app.include_router(model_options.router, prefix=prefix)  # before models/{id:path}
        app.include_router(openai_routes.router, prefix=prefix)
        app.include_router(anthropic_routes.router, prefix=prefix)
        app.include_router(admin_routes.router, prefix=prefix)
        app.include_router(model_routes.router, prefix=prefix)
        app.include_router(llamacpp_routes.router, prefix=prefix)
        app.include_router(system_routes.router, prefix=prefix)
        app.include_router(sessions.router, prefix=prefix)
        app.include_router(responses.router, prefix=prefix)
        app.include_router(adapter_routes.compat, prefix=prefix)
        app.include_router(logs_route.router, prefix=prefix)
    app.include_router(adapter_routes.router)
    app.include_router(admin_routes.internal)
    app.include_router(alias_routes.internal)
    app.include_router(config_routes.internal)
    app.include_router(memory_routes.internal)
    app.include_router(metrics_route.router)
    # Ollama's dialect (/api/chat, /api/tags, ...); Lemonade's lives under /api/v1.
    app.include_router(ollama_routes.router)
    app.include_router(ollama_models.router)
    app.include_router(ollama_create.router)
    app.include_router(ui_routes.router)

    @app.get("/live")
    async def live() -> dict[str, str]:
        return {"status": "ok"}

    @app.exception_handler(JugglerError)
    async def on_juggler_error(request: Request, exc: JugglerError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.url.path, exc.status, exc.message)
        return error_response(request, exc)

    @app.exception_handler(ClientGone)
    async def on_client_gone(request: Request, exc: ClientGone) -> Response:
        log.info(
            "%s %s: client went away; backend request closed", request.method, request.url.path
        )
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        err: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in err.get("loc", ())[1:]) or None
        return error_response(request, BadRequest(str(err.get("msg", exc)), param=param))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            error: JugglerError = NotFound(f"no route {request.method} {request.url.path}")
        elif exc.status_code == 405:
            error = BadRequest(f"{request.method} is not allowed on {request.url.path}")
            error.status, error.code = 405, "method_not_allowed"
        else:
            error = JugglerError(str(exc.detail))
            error.status = exc.status_code
        allow: dict[str, str] = {}
        if exc.status_code == 405:  # Allow lists every route of the path (RFC 9110)
            allow["Allow"] = ", ".join(allowed_methods(app, request.scope))
        return error_response(request, error, allow)

    document_request_bodies(app, default_model=settings.model)
    # Innermost of the middleware: everything below still guards the generation routes.
    app.add_middleware(
        GenerationLane,
        routes=generation_routes(
            API_PREFIXES,
            {
                "/chat/completions": openai_routes.chat_completions,
                "/completions": openai_routes.completions,
                "/messages": anthropic_routes.messages,
            },
            {"/api/chat": ollama_routes.chat, "/api/generate": ollama_routes.generate},
        ),
        on_error=error_response,
        gone=ClientGone,
    )
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        unlimited=("/api/blobs/",),
        error_bodies=EARLY_ERROR_BODIES,
    )
    app.add_middleware(
        AuthMiddleware,
        api_key=settings.api_key,
        admin_api_key=settings.admin_api_key,
        open_paths=OPEN_PATHS | ui_routes.OPEN_PAGES,
        open_prefixes=(ui_routes.OPEN_PREFIX,),
        error_bodies=EARLY_ERROR_BODIES,
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "X-Api-Key", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    guard = BrowserGuard(settings.host, settings.allowed_hosts, settings.cors_origins)
    app.add_middleware(BrowserGuardMiddleware, guard=guard)
    app.add_middleware(RequestIdMiddleware)
    return app
