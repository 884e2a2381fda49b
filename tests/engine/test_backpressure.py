"""Backpressure and a full KV cache with the real model (in-process engine).

Cancellation is pinned deterministically with the fake context (test_worker_sessions.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.runtime import Engine
from juggler.engine.schedule.stream import EventKind
from juggler.errors import ContextOverflow, Overloaded
from tests.engine.conftest import read_all, smol_config

pytestmark = pytest.mark.slow


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll a condition published by a worker thread, with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)  # polling interval


def test_slow_consumer_is_cut_off_while_others_go_on(smol_path: Path) -> None:
    async def scenario() -> None:
        engine = Engine(smol_config(smol_path, ctx_size=2048, parallel=4, stream_queue_size=4))
        await engine.start()
        try:
            params = SamplingParams(max_new_tokens=40, temperature=0.0)
            prompt = engine.tokenize_prompt("Write a long list of fruits:")
            stalled = await engine.complete(prompt, params)
            reader = await engine.complete(engine.tokenize_prompt("Count: 1, 2, 3,"), params)
            events = await asyncio.wait_for(read_all(reader), timeout=120)
            # The reader got everything it asked for.
            assert events[-1].kind is EventKind.DONE and events[-1].finish_reason == "length"
            assert sum(1 for e in events if e.kind is EventKind.TOKEN) == 40
            # The stalled stream holds at most its bound, then one final error event.
            stalled_events = await asyncio.wait_for(read_all(stalled), timeout=30)
            tokens = [e for e in stalled_events if e.kind is EventKind.TOKEN]
            assert len(tokens) == 4
            last = stalled_events[-1]
            assert last.kind is EventKind.ERROR and isinstance(last.error, Overloaded)
            assert engine.master is not None and engine.master.last_stats is not None
        finally:
            await engine.stop()

    asyncio.run(scenario())


def test_full_kv_evicts_cached_sequences_then_refuses_new_input_clearly(smol_path: Path) -> None:
    async def scenario() -> None:
        engine = Engine(smol_config(smol_path, ctx_size=256, parallel=4))
        await engine.start()
        try:

            def prompt(word: str) -> list[int]:
                toks = engine.tokenize_prompt(f" {word}" * 200)[:150]
                assert len(toks) == 150
                return toks

            params = SamplingParams(max_new_tokens=2, temperature=0.0)
            first = await read_all(await engine.complete(prompt("apple"), params))
            assert first[-1].kind is EventKind.DONE
            # The finished request's 150 cells stay cached; the next one needs them back.
            second = await read_all(await engine.complete(prompt("pear"), params))
            assert second[-1].kind is EventKind.DONE
            await until(lambda: engine.worker_snapshots()[0].num_running == 0)
            used = engine.worker_snapshots()[0]
            # 150 prompt tokens + the first generated one (the last is never decoded).
            assert used.num_cached == 1 and used.kv_used == 151
            # A live session holds 150 cells; a second one cannot get 150 more.
            one = (await engine.create_session())["session_id"]
            await engine.append_input(one, text=" plum" * 150)
            done = await read_all(await engine.generate(one, params))
            assert done[-1].kind is EventKind.DONE
            two = (await engine.create_session())["session_id"]
            with pytest.raises(ContextOverflow, match="KV cache is full"):
                await engine.append_input(two, text=" fig" * 150)
            with pytest.raises(ContextOverflow, match="KV cache is full"):
                await engine.complete(prompt("kiwi"), params)
            # The first session is untouched and still continues.
            again = await read_all(await engine.generate(one, params))
            assert again[-1].kind is EventKind.DONE
            assert again[-1].stats is not None and again[-1].stats.prompt_tokens_reused > 140
        finally:
            await engine.stop()

    asyncio.run(scenario())
