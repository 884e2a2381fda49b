"""From requests' `StreamSink`s to an HTTP answer: all of it at once, or SSE events.

Runs on the event loop. A request with n choices has n sinks (one generation each);
`merged` interleaves their events as they come. A client that goes away cancels its
generations: the SSE generator's `finally` cancels the sinks (Starlette cancels the
response task on disconnect), and a non-streaming request watches for the disconnect
while it waits, so the worker stops spending tokens on it at its next tick. SSE framing
is `juggler.api.sse`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from juggler.api import sse
from juggler.api.streams import ClosingStreamingResponse
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamEvent, StreamSink
from juggler.errors import JugglerError

T = TypeVar("T")


class ClientGone(JugglerError):
    """The client closed its connection before its work began (nginx's 499)."""

    status = 499
    code = "client_closed_request"


async def ensure_connected(request: Request) -> None:
    """ClientGone if the client already left: checked after the preparation of a request
    (in a thread, maybe long) so that a gone client's work never starts."""
    if await request.is_disconnected():
        raise ClientGone("the client closed the connection before generation began")


async def unless_gone(request: Request | None, work: Awaitable[T]) -> T:
    """The result of `work`; if the client leaves first, `work` is cancelled and
    ClientGone raised (a request waiting in a worker's queue for a sequence must leave
    it when nobody waits for its answer any more)."""
    if request is None:
        return await work
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.create_task(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if task.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone("the client closed the connection while its request waited")
    return task.result()


def cancel_all(sinks: Sequence[StreamSink]) -> None:
    for sink in sinks:
        sink.cancel()  # no-op when finished; stops the worker if the client left


#: What arrived together: (choice index, event) pairs, in arrival order.
Batch = list[tuple[int, StreamEvent]]


async def batches(sinks: Sequence[StreamSink]) -> AsyncIterator[Batch]:
    """Every choice's events as they come, what arrived together in one batch (a consumer
    that fell behind formats and writes them at once), until each sink has sent its
    final event."""
    if len(sinks) == 1:
        sink = sinks[0]
        while True:
            evs = await sink.take()
            yield [(0, ev) for ev in evs]
            if evs[-1].kind is not EventKind.TOKEN:
                return
    queue: asyncio.Queue[Batch] = asyncio.Queue()

    async def pump(i: int, sink: StreamSink) -> None:
        while True:
            evs = await sink.take()
            queue.put_nowait([(i, ev) for ev in evs])
            if evs[-1].kind is not EventKind.TOKEN:
                return

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(sinks)]
    try:
        left = len(sinks)
        while left:
            batch = await queue.get()
            while not queue.empty():
                batch += queue.get_nowait()
            left -= sum(ev.kind is not EventKind.TOKEN for _, ev in batch)
            yield batch
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def event_frames(
    sinks: Sequence[StreamSink],
    frames_of: Callable[[int, StreamEvent], list[bytes]],
    tail: Callable[[list[RequestStats | None]], bytes],
    head: bytes = b"",
) -> AsyncIterator[bytes]:
    """An SSE body over every choice's events: `head`, then the frames of each token or
    final event (`frames_of`, given the choice's index), those of the events that arrived
    together in one write, then `tail` of each choice's final stats. An error event ends
    it: the frames before it are written, and the error raised (`sse_response` writes it
    as the stream's last event)."""
    if head:
        yield head
    stats: list[RequestStats | None] = [None] * len(sinks)
    async for batch in batches(sinks):
        out: list[bytes] = []
        for i, ev in batch:
            if ev.kind is EventKind.ERROR:
                assert ev.error is not None
                if out:
                    yield b"".join(out)
                raise ev.error
            out += frames_of(i, ev)
            if ev.kind is EventKind.DONE:
                stats[i] = ev.stats
        if out:
            yield b"".join(out)
    yield tail(stats)


async def merged(sinks: Sequence[StreamSink]) -> AsyncIterator[tuple[int, StreamEvent]]:
    """(choice index, event) for every event of every sink, in arrival order, until each
    sink has sent its final event."""
    async for batch in batches(sinks):
        for item in batch:
            yield item


async def collect(sinks: Sequence[StreamSink], request: Request | None = None) -> list[StreamEvent]:
    """Every choice's events, merged per choice into one final event (text, token ids and
    logprobs of the whole generation); raises the first error."""

    async def watch() -> None:
        assert request is not None
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancel_all(sinks)

    watcher = asyncio.create_task(watch()) if request is not None else None
    parts: list[list[StreamEvent]] = [[] for _ in sinks]
    try:
        async for i, ev in merged(sinks):
            if ev.kind is EventKind.ERROR:
                assert ev.error is not None
                raise ev.error
            parts[i].append(ev)
    finally:
        if watcher is not None:
            watcher.cancel()
        cancel_all(sinks)
    return [_joined(evs) for evs in parts]


def _joined(events: list[StreamEvent]) -> StreamEvent:
    last = events[-1]
    return StreamEvent(
        last.kind,
        text="".join(e.text for e in events),
        token_ids=tuple(t for e in events for t in e.token_ids),
        logprobs=tuple(lp for e in events for lp in e.logprobs),
        finish_reason=last.finish_reason or "stop",
        stop_sequence=last.stop_sequence,
        stats=last.stats,
    )


async def drain(
    sink: StreamSink, request: Request | None = None
) -> tuple[str, str, RequestStats | None]:
    """Collect a whole generation (one choice): its text, finish reason and stats."""
    (done,) = await collect([sink], request)
    return done.text, done.finish_reason or "stop", done.stats


class EventStream(ClosingStreamingResponse):
    """An SSE answer and the generations it streams (`handoff` cancels them when it
    ends before the answer's body ever started)."""

    def __init__(self, body: AsyncIterator[bytes], sinks: Sequence[StreamSink]) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.sinks = sinks


def sse_response(objects: AsyncIterator[Any], sinks: Sequence[StreamSink]) -> EventStream:
    """An SSE response of `objects` (bytes go out as they are, anything else as a `data:`
    event); a JugglerError raised by them ends the stream with an error event."""

    async def gen() -> AsyncIterator[bytes]:
        try:
            async for obj in objects:
                yield obj if isinstance(obj, bytes) else sse.data(obj)
        except JugglerError as exc:
            yield sse.error(exc)
        finally:
            cancel_all(sinks)

    return EventStream(gen(), sinks)


def stream(
    sink: StreamSink,
    on_token: Callable[[str, tuple[int, ...]], Any | None],
    on_done: Callable[[str | None, RequestStats | None], list[Any]],
    head: list[Any] | None = None,
) -> StreamingResponse:
    """An SSE response for one generation: `head` objects, one object per token event
    (`on_token`, None sends nothing), then `on_done`'s objects and [DONE]; an error ends
    the stream with an error object instead. The events that arrived together go out in
    one write."""

    async def frames() -> AsyncIterator[bytes]:
        if head:
            yield b"".join(sse.data(obj) for obj in head)
        async for batch in batches([sink]):
            out: list[bytes] = []
            for _, ev in batch:
                if ev.kind is EventKind.TOKEN or ev.text:
                    obj = on_token(ev.text, ev.token_ids)
                    if obj is not None:
                        out.append(sse.data(obj))
                if ev.kind is EventKind.DONE:
                    out.extend(sse.data(obj) for obj in on_done(ev.finish_reason, ev.stats))
                    out.append(sse.DONE)
                elif ev.kind is EventKind.ERROR:
                    assert ev.error is not None
                    if out:
                        yield b"".join(out)
                    raise ev.error
            if out:
                yield b"".join(out)

    return sse_response(frames(), [sink])
