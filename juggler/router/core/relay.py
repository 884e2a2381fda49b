"""Relay one backend SSE stream to one client, and cut it cleanly when asked.

A reader task copies the backend's chunks into a small bounded queue; the response
generator yields them. The bound keeps backpressure intact: a client that stops reading
stops the reader, the backend's own stream queue fills, and the engine ends that
generation (seed 003: "Do not block the inference loop waiting on a slow consumer").
`cut(error)` (the graceful drain's deadline) ends the stream with an error event at
once, even while it waits for a chunk: no stream is ever cut without a word.

A face that speaks another dialect (Ollama's, Anthropic's) reads the relayed stream's
events and words them its own way: `translated` streams them, `read_whole` folds them
into one answer; both close the relay however they end (done, failed, or the client went
away), so the backend's lease is released at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx
from fastapi.responses import StreamingResponse

from juggler.api import sse
from juggler.errors import BackendDead, JugglerError

#: Chunks buffered between the backend and a client.
QUEUE_CHUNKS = 64
_END = b""
T = TypeVar("T")
#: A relayed stream's events: the JSON objects of its `data:` lines.
Events = AsyncIterator[dict[str, Any]]


class Relay:
    def __init__(
        self,
        response: httpx.Response,
        model: str,
        on_backend_failure: Callable[[], Awaitable[None]],
    ) -> None:
        self.response = response
        self.model = model
        self._on_backend_failure = on_backend_failure
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_CHUNKS)
        self._failure: BaseException | None = None
        self._cut: JugglerError | None = None

    def cut(self, error: JugglerError) -> None:
        """End the stream with `error` as its last event (event loop only)."""
        if self._cut is None:
            self._cut = error
            if self._chunks.empty():
                self._chunks.put_nowait(_END)  # wake the generator if it waits

    async def _pump(self) -> None:
        try:
            async for chunk in self.response.aiter_raw():
                if chunk:
                    await self._chunks.put(chunk)
        except httpx.TransportError as exc:
            self._failure = exc
        await self._chunks.put(_END)

    async def stream(self) -> AsyncGenerator[bytes, None]:
        """The client's body. Closing it (client gone) closes the backend response, which
        cancels the generation there."""
        reader = asyncio.create_task(self._pump())
        try:
            while True:
                chunk = await self._chunks.get()
                if self._cut is not None:
                    yield sse.error(self._cut)
                    return
                if not chunk:  # _END: the backend finished or failed
                    break
                yield chunk
            if self._failure is not None:
                await self._on_backend_failure()
                yield sse.error(BackendDead(f"backend for {self.model!r} died mid-stream"))
        finally:
            # Shielded: a client that leaves cancels the response's task group, whose
            # cancellation would otherwise end every await here before the backend
            # response is closed, and the generation there would run on for nobody.
            with anyio.CancelScope(shield=True):
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
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
