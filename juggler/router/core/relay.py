"""Relay one backend SSE stream to one client, and cut it cleanly when asked.

The response generator reads the backend's body as it arrives (`backend_http`) and
yields what came together as one chunk. Backpressure holds: a client that stops reading
stops the generator, the backend connection stops being read past its high-water mark,
the backend's own stream queue fills, and the engine ends that generation (seed 003:
"Do not block the inference loop waiting on a slow consumer").
`cut(error)` (the graceful drain's deadline) ends the stream with an error event at
once, even while it waits for a chunk: no stream is ever cut without a word.

A face that speaks another dialect (Ollama's, Anthropic's) reads the relayed stream's
events and words them its own way: `translated` streams them, `read_whole` folds them
into one answer; both close the relay however they end (done, failed, or the client went
away), so the backend's lease is released at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx
from fastapi.responses import StreamingResponse

from juggler.api import sse
from juggler.errors import BackendDead, JugglerError
from juggler.router.core.backend_http import BackendResponse
from juggler.router.core.heartbeat import PING, Heartbeat

T = TypeVar("T")
#: A relayed stream's events: the JSON objects of its `data:` lines.
Events = AsyncIterator[dict[str, Any]]


class Relay:
    def __init__(
        self,
        response: BackendResponse,
        model: str,
        on_backend_failure: Callable[[], Awaitable[None]],
        ping_interval_s: float = 0.0,
    ) -> None:
        self.response = response
        self.model = model
        self._on_backend_failure = on_backend_failure
        self._cut: JugglerError | None = None
        #: `heartbeat.PING` after this long without bytes from the backend (0: never).
        self.ping_interval_s = ping_interval_s

    def cut(self, error: JugglerError) -> None:
        """End the stream with `error` as its last event (event loop only)."""
        if self._cut is None:
            self._cut = error
            self.response.interrupt()  # wake the stream if it waits for the backend

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """The client's body: the backend's bytes as they come, the pieces that arrived
        together in one chunk. Closing it (client gone) closes the backend response,
        which cancels the generation there. While the backend is silent, a ping every
        `ping_interval_s` (`heartbeat`)."""
        failed = False
        beat = (
            Heartbeat(self.ping_interval_s, self.response.interrupt)
            if self.ping_interval_s
            else None
        )
        try:
            while self._cut is None:
                try:
                    chunk = await self.response.read_some()
                except httpx.TransportError:
                    failed = True
                    break
                if chunk is None:  # interrupted: cut, or a ping is owed
                    if beat is not None and beat.take() and self._cut is None:
                        yield PING
                    continue
                if not chunk:  # the backend finished
                    break
                if beat is not None:
                    beat.heard()
                yield chunk
            if self._cut is not None:
                yield sse.error(self._cut)
                return
            if failed:
                await self._on_backend_failure()
                yield sse.error(BackendDead(f"backend for {self.model!r} died mid-stream"))
        finally:
            # Shielded: a client that leaves cancels the response's task group, whose
            # cancellation would otherwise end every await here before the backend
            # response is closed, and the generation there would run on for nobody.
            with anyio.CancelScope(shield=True):
                if beat is not None:
                    await beat.stop()
                await self.response.aclose()


async def translated(
    response: StreamingResponse,
    translate: Callable[[Events], AsyncIterator[bytes]],
    after: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """`translate(events)` of a relayed stream, closing the relay however the stream
    ends; then, when it ran to its end, `after()`."""
    chunks: Any = response.body_iterator
    events = sse.read_data(chunks)
    try:
        async for piece in translate(events):
            yield piece
    finally:
        with anyio.CancelScope(shield=True):  # see Relay.stream
            await events.aclose()
            await chunks.aclose()
    if after is not None:
        await after()


async def read_whole(response: StreamingResponse, fold: Callable[[Events], Awaitable[T]]) -> T:
    """`fold(events)` of a relayed stream (one answer), closing the relay however it ends."""
    chunks: Any = response.body_iterator
    events = sse.read_data(chunks)
    try:
        return await fold(events)
    finally:
        with anyio.CancelScope(shield=True):  # see Relay.stream
            await events.aclose()
            await chunks.aclose()  # the relay releases its lease and the backend response
