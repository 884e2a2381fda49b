"""`juggler.api.streams.ClosingStreamingResponse`: a streamed answer's body generator
ends when the answer ends, however it ended (a loaded run caught a LoRA slot held for
60 s by a relay whose client had left while a chunk was being sent)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from juggler.api.streams import ClosingStreamingResponse


def body(closed: list[str]) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        try:
            for _ in range(1000):
                yield b"chunk"
        finally:
            closed.append("closed")

    return gen()


async def answer(gen: AsyncIterator[bytes], closed: list[str], *, block_on_send: bool) -> list[str]:
    """Serve `gen` to a client that disconnects after the first chunk; what `closed`
    holds right after the answer (read inside the loop: `asyncio.run` closes every
    generator left open when it ends)."""
    sent = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.set()
            if block_on_send:  # the disconnect lands while this chunk is being sent
                await asyncio.Event().wait()

    async def receive() -> dict[str, Any]:
        await sent.wait()
        return {"type": "http.disconnect"}

    scope = {"type": "http", "asgi": {"spec_version": "2.3"}}
    await ClosingStreamingResponse(gen)(scope, receive, send)
    return list(closed)


def test_a_client_that_leaves_during_a_send_closes_the_body_at_once() -> None:
    closed: list[str] = []
    gen = body(closed)  # held here, so only the response can close it, not the GC
    assert asyncio.run(answer(gen, closed, block_on_send=True)) == ["closed"]


def test_a_client_that_leaves_between_chunks_closes_the_body() -> None:
    closed: list[str] = []
    gen = body(closed)
    assert asyncio.run(answer(gen, closed, block_on_send=False)) == ["closed"]


def test_a_finished_answer_closes_its_body_once() -> None:
    closed: list[str] = []
    gen = body(closed)
    sent: list[bytes] = []

    async def run() -> list[str]:
        async def send(message: dict[str, Any]) -> None:
            sent.append(message.get("body", b""))

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client never leaves
            return {}

        await ClosingStreamingResponse(gen)({"type": "http"}, receive, send)
        return list(closed)

    assert asyncio.run(run()) == ["closed"]
    assert sent.count(b"chunk") == 1000
