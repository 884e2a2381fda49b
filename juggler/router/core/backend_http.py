"""The router's HTTP/1.1 client to its own backends, for the forwarded requests (issue 47).

Every request and every streamed chunk crosses the router on its way from a backend to
a client. httpx spent more router time per request than the relay itself: its pool
scans every connection on each request (`is_idle`, `has_expired`, a socket query each),
and a streamed chunk went through httpcore, h11 and anyio before the relay saw it.
Backends are our own processes on loopback, speaking one dialect of HTTP/1.1 (uvicorn's:
`Content-Length` or chunked bodies), so this client is small:

- `BackendPool` keeps idle keep-alive connections per backend origin, last used first,
  and drops one idle longer than `IDLE_S` (the backend closes them after
  `backend_key.BACKEND_KEEP_ALIVE_S`).
- `backend_conn.Connection` parses each response as its bytes arrive and hands the
  body over in whatever pieces are complete.
- Backpressure holds: past `HIGH_WATER` unread body bytes the socket stops being read, the
  backend's writes block, and its engine ends a stream nobody reads (seed 003).
- Closing a response before its end closes the connection: the backend sees the client
  leave and cancels the generation.

Errors are `BackendUnreachable` (an `httpx.TransportError`, which the proxy already
treats as a backend failure). A request on a reused connection that the backend had
already closed is sent again once on a new connection (nothing of it was answered).
Runs on the router's event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from juggler.router.core.backend_conn import BackendUnreachable, Connection

#: Seconds an idle pooled connection is kept (under the backend's keep-alive timeout).
IDLE_S = 30.0
CONNECT_TIMEOUT_S = 10.0


class BackendResponse:
    """A backend's answer: head read, body read whole (`aread`) or as it comes
    (`aiter_raw`). `aclose` (always call it) gives a finished connection back to the
    pool and closes one whose body was not read to its end."""

    def __init__(self, conn: Connection, pool: BackendPool, origin: str) -> None:
        self._conn = conn
        self._pool = pool
        self._origin = origin
        self.status_code = conn.status
        self.headers: Mapping[str, str] = conn.headers
        self._closed = False

    async def read_some(self) -> bytes | None:
        """See `Connection.read_some`."""
        return await self._conn.read_some()

    def interrupt(self) -> None:
        self._conn.interrupt()

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        while True:
            data = await self._conn.read_some()
            if data is None:
                continue
            if not data:
                return
            yield data

    async def aread(self) -> bytes:
        parts = [piece async for piece in self.aiter_raw()]
        return b"".join(parts)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.is_done and conn.keep_alive and not conn.is_closed and not conn._buf:
            self._pool.put(self._origin, conn)
        else:
            conn.close()


class BackendPool:
    """Keep-alive connections to backends, by origin (`http://host:port`)."""

    def __init__(self, headers_for: Callable[[str], Mapping[str, str]] | None = None) -> None:
        self._idle: dict[str, list[Connection]] = {}
        self._headers_for = headers_for or (lambda url: {})

    def _split(self, url: str) -> tuple[str, str, int, str]:
        """(origin, host, port, path+query) of `url`."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return f"http://{host}:{port}", host, port, path

    def put(self, origin: str, conn: Connection) -> None:
        conn.idle_since = time.monotonic()
        conn._reset()
        self._idle.setdefault(origin, []).append(conn)

    def _take(self, origin: str) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.is_closed and now - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, host: str, port: int) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(Connection, host, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            raise BackendUnreachable(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return conn

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> BackendResponse:
        """Send a request (a JSON `body`, or raw `content`) and read the answer's head."""
        origin, host, port, path = self._split(url)
        if content is None and body is not None:
            content = orjson.dumps(body)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
        for name, value in {**self._headers_for(url), **(headers or {})}.items():
            lines.append(f"{name}: {value}")
        if content is not None:
            if not any(n.lower() == "content-type" for n in (headers or {})):
                lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(content)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (content or b"")
        conn = self._take(origin)
        if conn is not None:
            try:
                return await self._exchange(conn, data, origin)
            except BackendUnreachable:
                if conn.got_bytes:
                    raise
                # The backend had closed this idle connection (restarted, or its
                # keep-alive ran out): the others are as old, so a new one.
                self._drop(origin)
        return await self._exchange(await self._connect(host, port), data, origin)

    async def _exchange(self, conn: Connection, data: bytes, origin: str) -> BackendResponse:
        """Send `data` on `conn` and read the answer's head; `conn` is closed if that
        fails or is cancelled (the backend then sees the client go)."""
        try:
            await conn.send(data)
            await conn.head()
        except BaseException:
            conn.close()
            raise
        return BackendResponse(conn, self, origin)

    def _drop(self, origin: str) -> None:
        """Close every idle connection to `origin`."""
        for conn in self._idle.pop(origin, []):
            conn.close()

    async def get_json(self, url: str, timeout_s: float) -> Any:
        """GET `url` and parse its JSON body, within `timeout_s` (TimeoutError); a
        non-200 answer or a body that is not JSON is ValueError."""

        async def fetch() -> tuple[int, bytes]:
            response = await self.request("GET", url)
            try:
                return response.status_code, await response.aread()
            finally:
                await response.aclose()

        status, body = await asyncio.wait_for(fetch(), timeout_s)
        if status != 200:
            raise ValueError(f"HTTP {status} from {url}")
        return orjson.loads(body)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
