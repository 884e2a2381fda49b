"""An OpenAI stream written by the backend straight into the client's connection
(issue 47; the backend's side and the exchange: `juggler.engine.http.handoff`).

Relaying a stream, the router reads each event from the backend and writes it to the
client: two socket operations a token, most of the router's time for a stream and a
tenth of a lone stream's. For OpenAI's streamed chat and completions the router instead
asks the backend to take the connection (`ask`); when the backend's head accepts,
`HandedOff` writes the client's response head, sends the connection's descriptor to the
backend's inbox, and waits for the backend's one word at the stream's end, the client
leaving, or the drain: then it writes the body's last chunk (or an error event first,
where the backend failed or never got the connection) and releases the lease. The
request id, CORS and the other middleware still see the response start; the lease, the
heartbeat's interval, the drain's cut and a client that leaves keep their meaning.

Only a plain HTTP/1.1 connection served by `connections.GuardedHttpProtocol` (which
puts its transport in the scope) is handed over; anything else is relayed.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from juggler.api import sse
from juggler.api.handoff import ACCEPT, CUT, DONE, GONE, HEADER, address
from juggler.api.streams import stop
from juggler.errors import BackendDead, JugglerError
from juggler.manager.lease import Lease
from juggler.router.core.backend_http import BackendResponse
from juggler.router.core.connections import TRANSPORT

log = logging.getLogger("juggler.router")

#: Inbox connections kept open (one a backend; a backend gone leaves one behind).
MAX_INBOXES = 32
#: The longest answer word read from a backend.
MAX_WORD = 64
_HEAD = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


def transport_of(scope: Scope) -> Any | None:
    """The client connection's transport when it can be handed over: plain HTTP/1.1
    from `GuardedHttpProtocol`, still open, nothing of it unsent."""
    transport = scope.get("extensions", {}).get(TRANSPORT)
    if transport is None or scope.get("http_version") != "1.1":
        return None
    if transport.get_extra_info("sslcontext") is not None or transport.is_closing():
        return None
    return transport


def ask(ping_s: float) -> tuple[str, dict[str, str]]:
    """A token and the header asking a backend to take the connection."""
    token = secrets.token_hex(16)
    return token, {HEADER: f"{token} {ping_s:g}"}


def accepted(response: BackendResponse) -> str | None:
    """The backend's inbox path when its head takes the handoff."""
    word, _, path = response.headers.get(HEADER, "").partition(" ")
    return path if word == ACCEPT and len(path) > 1 and path.startswith("@") else None


class Sender:
    """The router's connections to its backends' inboxes (one each, kept open), which
    carry the descriptors and the cuts (event loop only)."""

    def __init__(self) -> None:
        self._socks: dict[str, socket.socket] = {}

    async def send(self, path: str, text: str, fd: int | None = None) -> None:
        """One message to the inbox at `path`; a connection that broke (the backend
        restarted) is made again once. Raises OSError when the inbox is not there."""
        rights = (
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            if fd is not None
            else []
        )
        for attempt in (1, 2):
            sock = self._socks.get(path) or self._connect(path)
            try:
                while True:
                    try:
                        sock.sendmsg([text.encode()], rights)
                        return
                    except BlockingIOError:  # its buffer is full: wait until it is not
                        await _writable(sock)
            except OSError:
                self._drop(path)
                if attempt == 2:
                    raise

    def _connect(self, path: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(address(path))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        while len(self._socks) >= MAX_INBOXES:  # the oldest: most likely a backend gone
            self._drop(next(iter(self._socks)))
        self._socks[path] = sock
        return sock

    def _drop(self, path: str) -> None:
        sock = self._socks.pop(path, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for path in list(self._socks):
            self._drop(path)


async def _writable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


class HandedOff(Response):
    """The client's answer to a stream the backend writes (see the module doc)."""

    def __init__(
        self,
        lease: Lease,
        response: BackendResponse,
        token: str,
        path: str,
        sender: Sender,
        on_backend_failure: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__(status_code=200)
        self.lease = lease
        self.model = lease.model_name
        self.response = response
        self.token = token
        self.path = path
        self.sender = sender
        self._on_backend_failure = on_backend_failure
        self._cut: JugglerError | None = None
        self._cutting: asyncio.Future[None] | None = None
        self._given = False

    def cut(self, error: JugglerError) -> None:
        """End the stream with `error` as its last event (the drain; event loop only)."""
        if self._cut is not None:
            return
        self._cut = error
        if self._given:  # the backend writes it, after what it is writing
            self._cutting = asyncio.ensure_future(self._send_cut(error))
        else:
            self.response.interrupt()

    async def _send_cut(self, error: JugglerError) -> None:
        with contextlib.suppress(OSError):
            await self.sender.send(self.path, f"cut {self.token} {error.message}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEAD})
            last = await self._run(scope, receive)
            if last is not None:
                await send({"type": "http.response.body", "body": last, "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):  # the client may have left: close anyway
                await self.response.aclose()
            self.lease.release()

    async def _run(self, scope: Scope, receive: Receive) -> bytes | None:
        """Hand the connection over and wait for the stream's end: the body's last bytes
        to write (an error event, or nothing), None when the client left."""
        transport = transport_of(scope)
        if self._cut is not None:
            return sse.error(self._cut)
        if transport is None or transport.get_write_buffer_size():
            return sse.error(BackendDead("the stream could not be handed over"))
        fd = os.dup(transport.get_extra_info("socket").fileno())
        try:
            await self.sender.send(self.path, f"fd {self.token}", fd)
        except OSError as exc:
            log.warning("handing a stream of %s over failed: %s", self.model, exc)
            return sse.error(BackendDead(f"the stream could not be handed over: {exc}"))
        finally:
            os.close(fd)
        self._given = True
        if self._cut is not None:  # it came while the descriptor was on its way
            await self._send_cut(self._cut)
        word = asyncio.ensure_future(self._word())
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await asyncio.wait({word, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (word, gone):
                await stop(task)
        if not word.done() or word.cancelled():
            return None  # the client left: closing the backend response cancels the rest
        try:
            said = word.result()
        except httpx.TransportError:
            await self._on_backend_failure()
            return sse.error(BackendDead(f"backend for {self.model!r} died mid-stream"))
        if said in (DONE, CUT, GONE):
            return b""
        log.warning("a handed-over stream of %s ended with %r", self.model, said)
        return sse.error(BackendDead("the backend did not take the stream"))

    async def _word(self) -> bytes:
        """The backend's answer: one word once the stream is over."""
        said = b""
        while True:
            piece = await self.response.read_some()
            if piece is None:
                continue  # interrupted (a cut before the handover): the backend answers
            if not piece:
                return said.strip()
            said = (said + piece)[:MAX_WORD]


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
