"""Connections that cannot hold the server hostage (issue 27).

uvicorn waits forever for a request's headers: a client that dribbles one byte a second
keeps its socket (and a file descriptor) for as long as it likes, and enough of them
exhaust the descriptors. `GuardedHttpProtocol` (uvicorn's httptools protocol plus one
timer) closes a connection whose request headers have not all arrived within
`header_timeout_s` of its opening, or of the end of its previous response: nginx's
`client_header_timeout`, 60 s by default. Open connections are capped by uvicorn's
`limit_concurrency` (`max_connections`: 503 beyond it), and `raise_fd_limit` lifts the
process's descriptor limit above that cap at start, so idle sockets never starve the
answers to everyone else. The 503 is a JSON error like every other answer (uvicorn's own
is plain text), with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from typing import Any

from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Where `GuardedHttpProtocol` puts its transport in a request's scope (`handoff`).
TRANSPORT = "juggler.transport"

log = logging.getLogger("juggler.router")

#: Seconds a client has to send a request's headers (the `header_timeout_s` default).
HEADER_TIMEOUT_S = 60.0


_OVER_CAP = json.dumps(
    {
        "error": {
            "message": "too many open connections (max_connections); retry later",
            "type": "server_error",
            "param": None,
            "code": "overloaded",
        }
    }
).encode()


async def over_the_cap(scope: Any, receive: Any, send: Any) -> None:
    """uvicorn's answer beyond `limit_concurrency`, as a JSON error."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_OVER_CAP)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _OVER_CAP, "more_body": False})


# The protocol module looks `service_unavailable` up when a request comes in over the cap.
setattr(httptools_impl, "service_unavailable", over_the_cap)  # noqa: B010


class GuardedHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a deadline for each request's headers."""

    header_timeout_s = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            log.info("closing a connection whose request headers did not arrive in time")
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        # The connection, for a stream the backend writes into it (`handoff`).
        self.scope.setdefault("extensions", {})[TRANSPORT] = self.transport  # type: ignore[assignment]
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_timer()  # the next request's headers get the same deadline


def raise_fd_limit(wanted: int) -> int:
    """Lift this process's open-file limit to `wanted` (at most the hard limit); returns
    the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft
