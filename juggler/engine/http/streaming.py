"""From a request's `StreamSink` to an HTTP answer: all of it at once, or SSE events.

Runs on the event loop. A client that goes away cancels its generation: the SSE
generator's `finally` cancels the sink (Starlette cancels the response task on
disconnect), and a non-streaming request watches for the disconnect while it waits, so
the worker stops spending tokens on it at its next tick. SSE framing is
`juggler.api.sse`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from juggler.api import sse
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamSink


async def drain(
    sink: StreamSink, request: Request | None = None
) -> tuple[str, str, RequestStats | None]:
    """Collect a whole generation (non-streaming requests): its text, finish reason and
    stats; raises its error."""

    async def watch() -> None:
        assert request is not None
        while (await request.receive())["type"] != "http.disconnect":
            pass
        sink.cancel()

    watcher = asyncio.create_task(watch()) if request is not None else None
    parts: list[str] = []
    try:
        while True:
            ev = await sink.get()
            parts.append(ev.text)
            if ev.kind is EventKind.DONE:
                return "".join(parts), ev.finish_reason or "stop", ev.stats
            if ev.kind is EventKind.ERROR:
                assert ev.error is not None
                raise ev.error
    finally:
        if watcher is not None:
            watcher.cancel()
        sink.cancel()


def stream(
    sink: StreamSink,
    on_token: Callable[[str, tuple[int, ...]], Any | None],
    on_done: Callable[[str | None, RequestStats | None], list[Any]],
    head: list[Any] | None = None,
) -> StreamingResponse:
    """An SSE response: `head` objects, one object per token event (`on_token`, None
    sends nothing), then `on_done`'s objects and [DONE]; an error ends the stream with
    an error object instead."""

    async def gen() -> AsyncIterator[bytes]:
        try:
            for obj in head or []:
                yield sse.data(obj)
            while True:
                ev = await sink.get()
                if ev.kind is EventKind.TOKEN or ev.text:
                    obj = on_token(ev.text, ev.token_ids)
                    if obj is not None:
                        yield sse.data(obj)
                if ev.kind is EventKind.DONE:
                    for obj in on_done(ev.finish_reason, ev.stats):
                        yield sse.data(obj)
                    yield sse.DONE
                    return
                if ev.kind is EventKind.ERROR:
                    assert ev.error is not None
                    yield sse.error(ev.error)
                    return
        finally:
            sink.cancel()  # no-op when finished; stops the worker if the client left

    return StreamingResponse(
        gen(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
