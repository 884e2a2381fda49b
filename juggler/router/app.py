"""Build the router's FastAPI app: routes under /api/v1 and /v1, errors in OpenAI's shape.

The app owns one Manager (residency), one Proxy (HTTP client to backends) and the session
table; they live on `app.state.juggler` for the app's lifetime.
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

from juggler.config import Settings
from juggler.errors import BadRequest, JugglerError, error_body, render
from juggler.manager.manager import Manager
from juggler.registry.catalog import Registry
from juggler.router import admin_routes, metrics_route, openai_routes, sessions
from juggler.router.deps import RouterState
from juggler.router.middleware import AuthMiddleware, BodyLimitMiddleware
from juggler.router.proxy import ClientGone, Proxy

log = logging.getLogger("juggler.router")
API_PREFIXES = ("/api/v1", "/v1")


async def _load_default(manager: Manager, name: str) -> None:
    from juggler.manager.options import LoadOptions

    try:
        await manager.load(name, LoadOptions())
        log.info("default model %s is loaded", name)
    except JugglerError as exc:
        log.error("could not load the default model %s: %s", name, exc.message)


def create_app(settings: Settings, registry: Registry | None = None) -> FastAPI:
    registry = registry or Registry()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = Manager(settings, registry)
        await manager.start()
        proxy = Proxy(manager)
        app.state.juggler = RouterState(settings, registry, manager, proxy)
        warmup = (
            asyncio.create_task(_load_default(manager, settings.model)) if settings.model else None
        )
        try:
            yield
        finally:
            if warmup is not None:
                warmup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await warmup
            await proxy.aclose()
            await manager.stop()

    app = FastAPI(title="Juggler", version="0.1.0", lifespan=lifespan)
    for prefix in API_PREFIXES:
        app.include_router(openai_routes.router, prefix=prefix)
        app.include_router(admin_routes.router, prefix=prefix)
        app.include_router(sessions.router, prefix=prefix)
    app.include_router(admin_routes.internal)
    app.include_router(metrics_route.router)

    @app.get("/live")
    async def live() -> dict[str, str]:
        return {"status": "ok"}

    @app.exception_handler(JugglerError)
    async def on_juggler_error(request: Request, exc: JugglerError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%s %s -> %d %s", request.method, request.url.path, exc.status, exc.message)
        return JSONResponse(render(exc), status_code=exc.status)

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
        return JSONResponse(render(BadRequest(str(err.get("msg", exc)), param=param)), 400)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else "http_error"
        message = (
            f"no route {request.method} {request.url.path}"
            if exc.status_code == 404
            else str(exc.detail)
        )
        body = error_body(message, type="invalid_request_error", code=code)
        return JSONResponse(body, status_code=exc.status_code)

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        AuthMiddleware, api_key=settings.api_key, admin_api_key=settings.admin_api_key
    )
    return app
