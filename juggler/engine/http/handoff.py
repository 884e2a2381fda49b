"""A streamed answer written straight into the client's connection (issue 47).

Relayed, every event of a stream crosses two sockets more: the backend writes it to the
router, the router reads it and writes it to the client. On a fast device those two
socket operations a token are most of the router's work and a tenth of a lone stream's
time. So for an OpenAI stream the router hands the client's connection over: it asks
with `HEADER: <token> <ping seconds>`, this backend answers its head with
`HEADER: accept <address>` (its `Inbox`, a Unix socket that only this user's
processes may use), the router writes the client's response head itself and sends the
connection's descriptor to that address with the token (`SCM_RIGHTS`), and the backend
writes every event into it as a chunk of the chunked body the router began, with a
`: ping` comment after `ping` seconds of silence, as the router's relay would. Its answer
to the router is one word when the stream is over (`DONE`, `GONE`: the client left,
`CUT`: the router's drain asked for an end and the error event was written, `LOST`: no
descriptor came); then the router writes the body's last chunk and keeps the connection
for the client's next request. The backend never reads from the client's connection.

A client that leaves is noticed by both: the backend's write fails, and the router,
reading the connection, closes its request to the backend, which cancels the generation
as it does for a relayed stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import struct
import sys
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import Any

from starlette.requests import Request

from juggler.api import sse
from juggler.api.handoff import ACCEPT, CUT, DONE, GONE, HEADER, LOST, MAX_MESSAGE, address, chunk
from juggler.api.streams import ClosingStreamingResponse, close_body, stop
from juggler.engine.http.streaming import EventStream, cancel_all
from juggler.engine.schedule.stream import StreamSink
from juggler.errors import Overloaded

log = logging.getLogger(__name__)

#: How long the backend waits for the descriptor after its head (the router sends it
#: as soon as it has written the client's head).
FD_WAIT_S = 10.0


class _Handoff:
    """One stream waiting for its descriptor, and for a cut."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.fd: asyncio.Future[int] = loop.create_future()
        self.cut: asyncio.Future[str] = loop.create_future()


class Inbox:
    """The backend's socket for descriptors (event loop only): a sequenced-packet Unix
    socket in Linux's abstract namespace (no file to leave behind), which takes
    connections from this user's processes only (their credentials are checked); the
    router keeps one connection to it, each packet one message. Where the system has
    no such socket (not Linux), `open_inbox` gives None and streams are relayed."""

    def __init__(self, name: str | None = None) -> None:
        name = name or f"juggler-handoff-{secrets.token_hex(8)}"
        #: The address as the router is told it (the leading NUL written as "@").
        self.path = "@" + name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.sock.bind(address(self.path))
            self.sock.listen(8)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self._waiting: dict[str, _Handoff] = {}
        self._conns: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        for s in [*self._conns, self.sock]:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(s.fileno())
            s.close()
        self._conns.clear()

    def expect(self, token: str) -> _Handoff:
        assert self._loop is not None, "start() the inbox first"
        h = self._waiting[token] = _Handoff(self._loop)
        return h

    def forget(self, token: str) -> None:
        self._waiting.pop(token, None)

    def _accept(self) -> None:
        assert self._loop is not None
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        if _peer_uid(conn) != os.getuid():  # another user's process: never theirs
            conn.close()
            return
        conn.setblocking(False)
        self._conns.append(conn)
        self._loop.add_reader(conn.fileno(), self._readable, conn)

    def _readable(self, conn: socket.socket) -> None:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("handoff inbox: %s", exc)
                msg, fds = b"", []
            if not msg and not fds:  # the router closed its end
                assert self._loop is not None
                self._loop.remove_reader(conn.fileno())
                self._conns.remove(conn)
                conn.close()
                return
            self._deliver(msg.decode("ascii", "replace"), fds)

    def _deliver(self, text: str, fds: list[int]) -> None:
        kind, _, rest = text.partition(" ")
        token, _, message = rest.partition(" ")
        h = self._waiting.get(token)
        if kind == "fd" and len(fds) == 1 and h is not None and not h.fd.done():
            h.fd.set_result(fds[0])
            return
        for fd in fds:  # nobody waits for it (or a stray): never keep a descriptor
            os.close(fd)
        if kind == "cut" and h is not None and not h.cut.done():
            h.cut.set_result(message or "the stream was ended")


def _peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end (SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def wanted(request: Request) -> tuple[str, float] | None:
    """The token and the ping interval a router's request asks a handoff with."""
    value = request.headers.get(HEADER)
    if not value:
        return None
    token, _, ping = value.partition(" ")
    try:
        interval = float(ping) if ping else 0.0
    except ValueError:
        return None
    if not token or not token.isalnum() or len(token) > 64 or not 0.0 <= interval <= 3600:
        return None
    return token, interval


def take_over(inbox: Inbox | None, request: Request, answer: Any) -> Any:
    """`answer` as it is, or, for a stream whose router asked for a handoff, a
    response that writes the stream into the client's connection and answers the
    router with one word."""
    if inbox is None or not isinstance(answer, EventStream):
        return answer
    asked = wanted(request)
    if asked is None:
        return answer
    token, ping = asked
    frames = answer.body_iterator
    headers = {HEADER: f"{ACCEPT} {inbox.path}", "Cache-Control": "no-cache"}
    return ClosingStreamingResponse(
        _serve(inbox, token, ping, frames, answer.sinks), media_type="text/plain", headers=headers
    )


async def _serve(
    inbox: Inbox,
    token: str,
    ping: float,
    frames: AsyncIterable[Any],
    sinks: Sequence[StreamSink],
) -> AsyncIterator[bytes]:
    """The router's body: one word once the stream is written (see the module doc)."""
    h = inbox.expect(token)
    client: socket.socket | None = None
    try:
        try:
            fd = await asyncio.wait_for(asyncio.shield(h.fd), FD_WAIT_S)
        except TimeoutError:
            yield LOST
            return
        client = socket.socket(fileno=fd)
        client.setblocking(False)
        yield await _write(client, frames, h.cut, ping)
    finally:
        inbox.forget(token)  # a descriptor that comes later is closed on arrival
        if client is not None:
            client.close()  # this process's descriptor only: the router's stays open
        elif h.fd.done() and not h.fd.cancelled():
            os.close(h.fd.result())  # it came as this stream was being ended
        await close_body(frames)
        cancel_all(sinks)  # also when `frames` never started (no descriptor came)


class _Writer:
    """Writes chunks into the client's connection, one at a time (the stream's frames
    and the pings never interleave), and remembers when it last wrote."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.lock = asyncio.Lock()
        self.last = self.loop.time()

    async def write(self, data: bytes) -> None:
        async with self.lock:
            await self.loop.sock_sendall(self.client, chunk(data))
            self.last = self.loop.time()


async def _pump(writer: _Writer, frames: AsyncIterable[Any]) -> bytes:
    async for data in frames:
        if isinstance(data, str):
            data = data.encode()
        if data:
            await writer.write(bytes(data))
    return DONE


async def _write(
    client: socket.socket, frames: AsyncIterable[Any], cut: asyncio.Future[str], ping: float
) -> bytes:
    """Write `frames` into `client` until they end (DONE), the client leaves (GONE) or
    the router asks for an end (CUT: an error event is written last). A frame costs
    its write only: the pings and the cut are watched beside it."""
    writer = _Writer(client)
    pump = asyncio.ensure_future(_pump(writer, frames))
    try:
        while True:
            wait = writer.last + ping - writer.loop.time() if ping else None
            either: set[asyncio.Future[Any]] = {pump, cut}
            done, _ = await asyncio.wait(
                either,
                timeout=None if wait is None else max(wait, 0.0),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if pump in done:
                return pump.result()
            if cut in done:
                async with writer.lock:  # never between the bytes of a frame
                    await stop(pump)
                await writer.write(sse.error(Overloaded(cut.result())))
                return CUT
            if ping and writer.loop.time() - writer.last >= ping:
                await writer.write(sse.PING)
    except OSError:  # the client's connection broke: it left
        return GONE
    finally:
        await stop(pump)


def open_inbox() -> Inbox | None:
    """This backend's inbox, or None (streams are then relayed) where it cannot be made:
    abstract Unix sockets and peer credentials are Linux's."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return Inbox()
    except OSError as exc:
        log.warning("streams will be relayed by the router: no handoff inbox (%s)", exc)
        return None
