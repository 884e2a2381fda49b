"""One keep-alive HTTP/1.1 connection to a backend and the parser of the response in
flight (issue 47), for `backend_http`'s pool.

`Connection` is an `asyncio.Protocol`: bytes are parsed as they arrive (head, then a
`Content-Length` or chunked body), and the body is handed over in whatever pieces are
complete, so several SSE events that arrived together reach the client in one write.
Past `HIGH_WATER` unread body bytes the socket stops being read (backpressure). Runs on
the router's event loop only.
"""

from __future__ import annotations

import asyncio
from typing import cast

import httpx

WRITE_TIMEOUT_S = 60.0
#: Unread body bytes past which the socket is no longer read (backpressure).
HIGH_WATER = 256 * 1024
#: Longest response head accepted.
MAX_HEAD = 64 * 1024


class BackendUnreachable(httpx.TransportError):
    """The backend could not be reached, or the connection broke mid-answer."""


class Connection(asyncio.Protocol):
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
        if self.transport is None or self.is_closed or self.transport.is_closing():
            raise BackendUnreachable("the backend closed the connection")
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
