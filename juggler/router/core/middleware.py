"""Pure ASGI middleware: request ids, API-key checks and the request-body size limit.

They answer before any route runs, in the error shape the app gives them
(`error_bodies`: OpenAI's, or the dialect's that claims the path), and hold no state
beyond their settings.
"""

from __future__ import annotations

import json
import logging
import re
import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from juggler.errors import JugglerError, PayloadTooLarge, Unauthorized
from juggler.router.core.error_bodies import ErrorBodies
from juggler.router.core.security import (
    admin_only,
    admin_refusal,
    is_browser,
    is_loopback,
    key_matches,
    presented_key,
)

log = logging.getLogger("juggler.router")
#: Paths served without the API key: /live (the app adds the dashboard's files).
OPEN_PATHS = frozenset({"/live"})
REQUEST_ID_HEADER = b"x-request-id"
_SAFE_ID = re.compile(rb"^[A-Za-z0-9._\-]{1,64}$")


def request_id_of(scope: Scope) -> str:
    rid = scope.get("state", {}).get("request_id")
    return str(rid) if rid else ""


async def send_error(
    send: Send,
    exc: JugglerError,
    request_id: str = "",
    path: str = "",
    bodies: ErrorBodies | None = None,
) -> None:
    """The error as the response, in the shape `bodies` gives `path` (OpenAI's without)."""
    body = json.dumps((bodies or ErrorBodies())(exc, request_id, path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if request_id:
        headers.append((REQUEST_ID_HEADER, request_id.encode()))
    if isinstance(exc, Unauthorized):
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestIdMiddleware:
    """Give every request an id (the client's `X-Request-ID` if it is sane, else a new
    one), keep it in `scope["state"]` for error bodies and logs, and echo it back.

    The outermost of our middleware, so it is also the last resort: an exception no
    handler turned into a response becomes a JSON 500 with the id (never plain text)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", []) if k == REQUEST_ID_HEADER), b"")
        rid = given.decode() if _SAFE_ID.match(given) else "req-" + secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = rid

        started = False

        async def with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, with_id)
        except Exception as exc:
            log.exception("%s %s [%s] failed", scope.get("method"), scope.get("path"), rid)
            if not started:  # else the response is half sent: the connection just ends
                await send_error(send, JugglerError(f"internal error: {type(exc).__name__}"), rid)


class AuthMiddleware:
    """`api_key` guards every route but /live and the dashboard's files (the admin key
    works there too); /internal/* and the logs need the admin key when one is set, else
    a loopback client (`security.admin_refusal`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | None,
        admin_api_key: str | None,
        open_paths: frozenset[str] = OPEN_PATHS,
        open_prefixes: tuple[str, ...] = (),
        error_bodies: ErrorBodies | None = None,
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.admin_api_key = admin_api_key
        self.open_paths = open_paths
        self.open_prefixes = open_prefixes
        self.error_bodies = error_bodies

    def is_open(self, path: str) -> bool:
        """Routes that need no key: /live, and the dashboard's page and static files (they
        hold no data; the page's API calls carry the key)."""
        return path in self.open_paths or path.startswith(self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        token = presented_key(scope.get("headers", []))
        is_admin = key_matches(token, self.admin_api_key)
        client = scope.get("client")
        state = scope.setdefault("state", {})
        state["is_admin"] = is_admin
        # The owner at the keyboard (issue 22): with no admin key configured, a loopback
        # client that is not a browser may register local files anywhere readable.
        state["is_local_owner"] = is_admin or (
            not self.admin_api_key
            and is_loopback(client[0] if client else None)
            and not is_browser(k for k, _ in scope.get("headers", []))
        )
        rid = request_id_of(scope)
        what = admin_only(scope["path"])
        if what is not None:
            refusal = admin_refusal(
                what,
                is_admin=is_admin,
                has_admin_key=bool(self.admin_api_key),
                client_host=client[0] if client else None,
            )
            if refusal is not None:
                await send_error(send, refusal, rid)
                return
        # /internal/* is the admin's (or loopback's) alone; the admin key works everywhere.
        needs_api_key = bool(self.api_key) and what != "/internal/*" and not is_admin
        if needs_api_key and not key_matches(token, self.api_key):
            refusal = Unauthorized(
                "a valid API key is required (Authorization: Bearer, or x-api-key)"
            )
            await send_error(send, refusal, rid, scope["path"], self.error_bodies)
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse request bodies over `max_bytes` with 413, by Content-Length or by counting.
    Paths under `unlimited` (file uploads, which stream to disk) are not limited."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        unlimited: tuple[str, ...] = (),
        error_bodies: ErrorBodies | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.unlimited = unlimited
        self.error_bodies = error_bodies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.unlimited):
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(f"request body is larger than {self.max_bytes} bytes")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await send_error(
                    send, too_large, request_id_of(scope), scope["path"], self.error_bodies
                )
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
                await send_error(
                    send, too_large, request_id_of(scope), scope["path"], self.error_bodies
                )


class _BodyTooLarge(Exception):
    pass
