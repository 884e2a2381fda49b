"""The backend's side of a handed-over stream (issue 47, `engine.http.handoff`): the
inbox takes descriptors only for streams that wait for them, and the writer frames the
stream's events as chunks into the client's connection, pings while it is silent,
writes the drain's error event last, and stops when the client leaves. Real sockets,
no model."""

from __future__ import annotations

import array
import asyncio
import os
import socket
from collections.abc import AsyncIterator, Callable

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from juggler.api import sse
from juggler.api.handoff import ACCEPT, CUT, DONE, GONE, HEADER, LOST, address, chunk
from juggler.engine.http import handoff
from juggler.engine.http.streaming import EventStream
from juggler.engine.schedule.stream import StreamSink


def send(path: str, text: str, fd: int | None = None) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(address(path))
        fds = [fd] if fd is not None else []
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        s.sendmsg([text.encode()], rights)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the other end closes (then closes this end)."""
    sock.settimeout(10)
    out = b""
    with sock:
        while got := sock.recv(65536):
            out += got
    return out


async def frames_of(*items: bytes, pause_s: float = 0.0) -> AsyncIterator[bytes]:
    for i, item in enumerate(items):
        if i and pause_s:
            await asyncio.sleep(pause_s)
        yield item


def test_the_inbox_hands_a_descriptor_to_the_stream_that_waits_for_it() -> None:
    async def main() -> None:
        inbox = handoff.Inbox()
        inbox.start()
        try:
            assert inbox.path.startswith("@juggler-handoff-")  # no file: nothing left behind
            waiting = inbox.expect("t1")
            a, b = socket.socketpair()
            send(inbox.path, "fd t1", a.fileno())
            fd = await asyncio.wait_for(waiting.fd, 10)
            assert fd not in (a.fileno(), b.fileno())  # its own copy of the connection
            os.write(fd, b"hello")
            os.close(fd)
            assert b.recv(5) == b"hello"
            # A descriptor nobody waits for is closed at once; a cut reaches its stream.
            send(inbox.path, "fd nobody", a.fileno())
            send(inbox.path, "cut t1 the server is shutting down")
            assert await asyncio.wait_for(waiting.cut, 10) == "the server is shutting down"
            a.close()
            b.close()
        finally:
            inbox.close()

    asyncio.run(main())


def written(
    frames_for: Callable[[asyncio.Future[str]], AsyncIterator[bytes]],
    ping: float = 0.0,
    *,
    client_left: bool = False,
) -> tuple[bytes, bytes]:
    """The writer's word, and what the client's end of a socket pair received, for the
    events `frames_for(cut)` gives (they may set the cut)."""

    async def main() -> tuple[bytes, bytes]:
        ours, client = socket.socketpair()
        ours.setblocking(False)
        if client_left:
            client.close()
        cut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        word = await handoff._write(ours, frames_for(cut), cut, ping=ping)
        ours.close()
        return word, b"" if client_left else read_all(client)

    return asyncio.run(main())


def test_the_writer_frames_each_event_as_a_chunk_and_pings_when_silent() -> None:
    word, got = written(
        lambda cut: frames_of(b"data: one\n\n", b"data: two\n\n", pause_s=0.5), ping=0.1
    )
    assert word == DONE
    assert got.startswith(chunk(b"data: one\n\n") + chunk(sse.PING))
    assert got.endswith(chunk(b"data: two\n\n"))
    assert b"0\r\n\r\n" not in got  # the router writes the body's end


def test_a_cut_ends_the_stream_with_an_error_event() -> None:
    async def one_then_cut(cut: asyncio.Future[str]) -> AsyncIterator[bytes]:
        yield b"data: one\n\n"  # written before the next event is asked for
        cut.set_result("the server is shutting down")
        await asyncio.Event().wait()  # no more events: the cut ends the stream
        yield b"data: never\n\n"

    word, got = written(one_then_cut)
    assert word == CUT
    assert got.startswith(chunk(b"data: one\n\n"))
    assert b"never" not in got
    assert b"the server is shutting down" in got and got.endswith(b"\n\n\r\n")


def test_a_client_that_left_ends_the_writing() -> None:
    word, _ = written(lambda cut: frames_of(b"data: x\n\n"), client_left=True)
    assert word == GONE


def request_with(headers: dict[str, str]) -> Request:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


@pytest.mark.parametrize(
    "value",
    ["", "tok/../x 5", "t" * 65 + " 5", "tok five", "tok -1", "tok 99999"],
)
def test_only_a_well_formed_ask_is_taken(value: str) -> None:
    assert handoff.wanted(request_with({HEADER: value})) is None


def test_take_over_keeps_every_answer_but_an_asked_stream() -> None:
    async def main() -> None:
        inbox = handoff.Inbox()
        inbox.start()
        try:
            stream = EventStream(frames_of(b"x"), [])
            asked = request_with({HEADER: "abc123 5"})
            assert handoff.take_over(inbox, request_with({}), stream) is stream
            assert handoff.take_over(None, asked, stream) is stream
            plain = JSONResponse({"a": 1})
            assert handoff.take_over(inbox, asked, plain) is plain
            other = StreamingResponse(frames_of(b"x"), media_type="text/event-stream")
            assert handoff.take_over(inbox, asked, other) is other  # not an engine stream
            taken = handoff.take_over(inbox, asked, stream)
            assert taken is not stream
            assert taken.headers[HEADER] == f"{ACCEPT} {inbox.path}"
        finally:
            inbox.close()

    asyncio.run(main())


def test_the_inbox_refuses_another_users_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its abstract address is reachable by any process: only this user's may use it
    (the peer's credentials, read from the kernel, stand for another user's here)."""
    monkeypatch.setattr(handoff, "_peer_uid", lambda conn: os.getuid() + 1)

    async def main() -> None:
        inbox = handoff.Inbox()
        inbox.start()
        try:
            waiting = inbox.expect("t1")
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(address(inbox.path))
                s.setblocking(False)
                got = asyncio.get_running_loop().sock_recv(s, 16)
                assert await asyncio.wait_for(got, 10) == b""  # the inbox closed it
            assert not waiting.fd.done() and not inbox._conns
        finally:
            inbox.close()

    asyncio.run(main())


def test_a_stream_whose_connection_never_comes_cancels_its_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The router asked but sent no descriptor (it failed, or its client left first):
    the backend answers `lost` and its generation stops, though the stream's body never
    started."""
    monkeypatch.setattr(handoff, "FD_WAIT_S", 0.1)

    async def main() -> tuple[list[bytes], StreamSink]:
        inbox = handoff.Inbox()
        inbox.start()
        sink = StreamSink()
        try:
            asked = request_with({HEADER: "abc123 5"})
            taken = handoff.take_over(inbox, asked, EventStream(frames_of(b"x"), [sink]))
            words = [piece async for piece in taken.body_iterator]
        finally:
            inbox.close()
        return words, sink

    words, sink = asyncio.run(main())
    assert words == [LOST]
    assert sink.is_cancelled


def test_elsewhere_than_linux_streams_are_relayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """No abstract Unix sockets nor peer credentials there: no inbox, so the backend
    never accepts a handoff and the router relays every stream."""
    monkeypatch.setattr(handoff.sys, "platform", "darwin")
    assert handoff.open_inbox() is None
