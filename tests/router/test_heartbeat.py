"""Issue 49, part 5, the pure parts: "Send SSE comment heartbeats (`: ping`) at a settable
interval until the first token, in every streaming dialect where the wire format allows
a comment ...; Ollama's NDJSON stream gets what Ollama sends." A relay over a backend
response that waits until told (no model, no sockets); the reading side of a ping."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from juggler.api import sse
from juggler.router.anthropic.answer import MessageEvents
from juggler.router.core.heartbeat import PING
from juggler.router.core.relay import Relay
from juggler.router.ollama.answer import OllamaAnswer


class QuietBackend:
    """A backend response whose body comes only when the test sends it."""

    def __init__(self) -> None:
        self.parts: asyncio.Queue[bytes] = asyncio.Queue()
        self.woken = asyncio.Event()
        self.closed = False

    async def read_some(self) -> bytes | None:
        if not self.parts.empty():
            return self.parts.get_nowait()
        get = asyncio.ensure_future(self.parts.get())
        wake = asyncio.ensure_future(self.woken.wait())
        done, _ = await asyncio.wait({get, wake}, return_when=asyncio.FIRST_COMPLETED)
        for task in (get, wake):
            task.cancel()
        self.woken.clear()
        return get.result() if get in done and not get.cancelled() else None

    def interrupt(self) -> None:
        self.woken.set()

    async def aclose(self) -> None:
        self.closed = True


async def _failed() -> None:
    raise AssertionError("the backend did not fail")


async def relayed(interval_s: float) -> tuple[list[bytes], QuietBackend]:
    backend = QuietBackend()
    relay = Relay(backend, "m", _failed, interval_s)  # type: ignore[arg-type]
    out: list[bytes] = []
    stream = relay.stream()
    deadline = time.monotonic() + 30
    while out.count(PING) < 3:  # the backend is silent: pings, one an interval
        assert time.monotonic() < deadline, out
        out.append(await asyncio.wait_for(anext(stream), 30))
    await backend.parts.put(b'data: {"x": 1}\n\n')
    while out[-1] == PING:
        out.append(await asyncio.wait_for(anext(stream), 30))
    await backend.parts.put(b"")  # the end
    out += [chunk async for chunk in stream]
    return out, backend


def test_a_silent_backend_gets_pings_and_its_bytes_pass_unchanged() -> None:
    out, backend = asyncio.run(relayed(0.01))
    first = out.index(b'data: {"x": 1}\n\n')
    assert set(out[:first]) == {PING} and first >= 3
    assert backend.closed and PING == b": ping\n\n"


def test_the_heartbeat_ends_with_its_stream() -> None:
    async def scenario() -> set[asyncio.Task[Any]]:
        await relayed(0.01)
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    assert asyncio.run(scenario()) == set()


def test_no_interval_no_pings() -> None:
    async def scenario() -> list[bytes]:
        backend = QuietBackend()
        relay = Relay(backend, "m", _failed, 0.0)  # type: ignore[arg-type]
        await backend.parts.put(b"data: {}\n\n")
        await backend.parts.put(b"")
        assert not backend.woken.is_set()
        return [chunk async for chunk in relay.stream()]

    assert asyncio.run(scenario()) == [b"data: {}\n\n"]


def test_dialects_that_read_events_see_a_ping_their_own_way() -> None:
    """Anthropic's stream has a `ping` event of its own; Ollama's NDJSON has no comments
    and Ollama sends nothing while it reads a prompt."""

    async def events() -> list[dict[str, Any]]:
        async def chunks() -> Any:
            yield b": ping\n\n"
            yield b'data: {"choices": []}\n\n: ping\n\ndata: [DONE]\n\n'

        return [e async for e in sse.read_data(chunks())]

    got = asyncio.run(events())
    assert got == [sse.PING_EVENT, {"choices": []}, sse.PING_EVENT]
    assert MessageEvents("m", 4).feed(sse.PING_EVENT) == [{"type": "ping"}]

    async def ollama_items() -> list[Any]:
        async def evs() -> Any:
            for e in got:
                yield e

        return [item async for item in OllamaAnswer("m", True, time.perf_counter()).items(evs())]

    assert asyncio.run(ollama_items()) == []
