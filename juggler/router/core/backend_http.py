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
- `_Connection` is an `asyncio.Protocol`: bytes are parsed as they arrive (head, then a
  `Content-Length` or chunked body), and the body is handed over in whatever pieces are
  complete, so several SSE events that arrived together reach the client in one write.
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
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import orjson

#: Seconds an idle pooled connection is kept (under the backend's keep-alive timeout).
IDLE_S = 30.0
#: Unread body bytes past which the socket is no longer read (backpressure).
HIGH_WATER = 256 * 1024
CONNECT_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 60.0
#: Longest response head accepted.
MAX_HEAD = 64 * 1024


class BackendUnreachable(httpx.TransportError):
    """The backend could not be reached, or the connection broke mid-answer."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the parser of the response in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.is_closed = False
        self.idle_since = 0.0
        self._buf = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.has_head = False
        self.is_done = False
        self.got_bytes = False
        self._body: list[bytes] = []
        self._unread = 0
        self._length = -1  # bytes of a Content-Length body still to come
        self._chunk = -1  # bytes of the current chunk still to come (-1: size line next)
        self._chunked = False
        self._error: BaseException | None = None
        self._paused = False
        self._interrupted = False

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_closed = True
        if not self.is_done:
            self._error = BackendUnreachable(
                f"the backend closed the connection{f': {exc}' if exc else ''}"
            )
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self._buf += data
        try:
            self._parse()
        except ValueError as exc:
            self._error = BackendUnreachable(f"the backend answered malformed HTTP: {exc}")
            self.close()
        self._wake()

    def eof_received(self) -> bool | None:
        if self.has_head and not self._chunked and self._length < 0:
            self._finish()  # a body that ends with the connection
        return None

    # -- parsing ------------------------------------------------------------------------
    def _parse(self) -> None:
        buf = self._buf
        if not self.has_head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ValueError("response head too long")
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            del buf[: end + 4]
            self.status = int(lines[0].split(" ", 2)[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self.has_head = True
            self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if self.headers.get("connection", "").lower() == "close":
                self.keep_alive = False
            if not self._chunked:
                length = self.headers.get("content-length")
                if length is not None:
                    self._length = int(length)
                elif self.status in (204, 304) or 100 <= self.status < 200:
                    self._length = 0
                else:
                    self.keep_alive = False  # the body ends with the connection
        if self._chunked:
            self._parse_chunks()
        elif self._length >= 0:
            take = min(self._length, len(buf))
            if take:
                self._add(bytes(buf[:take]))
                del buf[:take]
                self._length -= take
            if self._length == 0:
                self._finish()
        elif buf:
            self._add(bytes(buf))
            buf.clear()

    def _parse_chunks(self) -> None:
        buf = self._buf
        while not self.is_done:
            if self._chunk < 0:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buf[:end]).split(b";", 1)[0], 16)
                del buf[: end + 2]
                if size == 0:
                    self._chunk = -2  # the last chunk: trailers until an empty line
                else:
                    self._chunk = size
            if self._chunk == -2:
                end = buf.find(b"\r\n")
                if end < 0:
                    return
                del buf[: end + 2]
                if end == 0:
                    self._finish()
                continue
            if len(buf) < self._chunk + 2:
                # A chunk's first part is handed on at once (a big body need not wait).
                take = min(self._chunk, len(buf))
                if take:
                    self._add(bytes(buf[:take]))
                    del buf[:take]
                    self._chunk -= take
                return
            self._add(bytes(buf[: self._chunk]))
            del buf[: self._chunk + 2]
            self._chunk = -1

    def _add(self, data: bytes) -> None:
        if data:
            self._body.append(data)
            self._unread += len(data)
            if self._unread > HIGH_WATER and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()

    def _finish(self) -> None:
        self.is_done = True

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- the response in flight (its owner) -----------------------------------------------
    async def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if self._writable is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._writable), WRITE_TIMEOUT_S)
            except TimeoutError:
                self.close()
                raise BackendUnreachable("writing the request to the backend timed out") from None

    async def head(self) -> None:
        while not self.has_head:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read_some(self) -> bytes | None:
        """The body bytes that arrived since the last call (waiting for some); b"" at its
        end, None when `interrupt` woke it first. Raises BackendUnreachable if the
        connection broke first."""
        while not self._body:
            if self.is_done:
                return b""
            if self._error is not None:
                raise self._error
            if self._interrupted:
                self._interrupted = False
                return None
            await self._wait()
        out = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._unread = 0
        if self._paused and self.transport is not None and not self.is_closed:
            self._paused = False
            self.transport.resume_reading()
        return out

    def interrupt(self) -> None:
        """Make a `read_some` waiting now (or the next one) return None if no body bytes
        are there."""
        self._interrupted = True
        self._wake()

    def close(self) -> None:
        self.is_closed = True
        if self.transport is not None:
            self.transport.close()


class BackendResponse:
    """A backend's answer: head read, body read whole (`aread`) or as it comes
    (`aiter_raw`). `aclose` (always call it) gives a finished connection back to the
    pool and closes one whose body was not read to its end."""

    def __init__(self, conn: _Connection, pool: BackendPool, origin: str) -> None:
        self._conn = conn
        self._pool = pool
        self._origin = origin
        self.status_code = conn.status
        self.headers: Mapping[str, str] = conn.headers
        self._closed = False

    async def read_some(self) -> bytes | None:
        """See `_Connection.read_some`."""
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
        self._idle: dict[str, list[_Connection]] = {}
        self._headers_for = headers_for or (lambda url: {})

    def _split(self, url: str) -> tuple[str, str, int, str]:
        """(origin, host, port, path+query) of `url`."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return f"http://{host}:{port}", host, port, path

    def put(self, origin: str, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        conn._reset()
        self._idle.setdefault(origin, []).append(conn)

    def _take(self, origin: str) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.is_closed and now - conn.idle_since < IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, host, port), CONNECT_TIMEOUT_S
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
        for _ in range(2):
            conn = self._take(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(host, port)
            try:
                await conn.send(data)
                await conn.head()
            except BackendUnreachable:
                conn.close()
                if reused and not conn.got_bytes:
                    continue  # the backend had closed this idle connection: a new one
                raise
            except BaseException:
                conn.close()  # cancelled: the backend sees the client go
                raise
            return BackendResponse(conn, self, origin)
        raise AssertionError("unreachable")

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
