"""Pure ASGI middleware: API-key checks and the request-body size limit.

Both answer in OpenAI's error shape before any route runs. They hold no state beyond
their settings.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from juggler.errors import JugglerError, PayloadTooLarge, Unauthorized, render

OPEN_PATHS = frozenset({"/live"})


async def send_error(send: Send, exc: JugglerError) -> None:
    body = json.dumps(render(exc)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if isinstance(exc, Unauthorized):
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            text = value.decode("latin-1")
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def _matches(token: str | None, key: str) -> bool:
    return token is not None and hmac.compare_digest(token.encode(), key.encode())


class AuthMiddleware:
    """`api_key` guards every route but /live; `admin_api_key` guards /internal/*."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, admin_api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key
        self.admin_api_key = admin_api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        token = _bearer(scope)
        if scope["path"].startswith("/internal/") and self.admin_api_key:
            if not _matches(token, self.admin_api_key):
                await send_error(send, Unauthorized("a valid admin API key is required"))
                return
        elif self.api_key and not _matches(token, self.api_key):
            await send_error(
                send, Unauthorized("a valid API key is required (Authorization: Bearer)")
            )
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse request bodies over `max_bytes` with 413, by Content-Length or by counting."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(f"request body is larger than {self.max_bytes} bytes")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(send, too_large)
                return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await send_error(send, too_large)


class _BodyTooLarge(Exception):
    pass
