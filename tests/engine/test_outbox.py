"""A worker hands its results to the event loop in batches, not once per token."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.runtime import Engine
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.schedule.stream import EventKind
from juggler.engine.worker.worker import Worker
from tests.engine.conftest import read_all, smol_config


def test_outbox_runs_items_in_order_only_when_flushed() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        box = Outbox(loop)
        seen: list[int] = []
        fut: asyncio.Future[str] = loop.create_future()

        def producer() -> None:  # a worker thread
            for i in range(5):
                box.call(seen.append, i)
            box.resolve(fut, "done")
            box.flush()
            box.flush()  # nothing queued: no wake-up

        t = threading.Thread(target=producer)
        t.start()
        t.join()
        assert seen == [], "nothing runs before the loop gets to the flushed batch"
        assert await asyncio.wait_for(fut, 5) == "done"
        assert seen == [0, 1, 2, 3, 4]
        assert box.num_flushes == 1

    asyncio.run(scenario())


@pytest.mark.slow
def test_streams_wake_the_loop_per_tick_and_plain_requests_once(smol_path: Path) -> None:
    async def scenario() -> None:
        engine = Engine(smol_config(smol_path, ctx_size=2048, parallel=4))
        await engine.start()
        try:
            worker = engine.workers[0]
            assert isinstance(worker, Worker)
            params = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
            prompts = [engine.tokenize_prompt(f"List {i}: apples, pears,") for i in range(4)]
            flushes0, decodes0 = worker.outbox.num_flushes, worker.snapshot.num_decodes
            sinks = [await engine.complete(p, params) for p in prompts]
            streamed = await asyncio.gather(*(read_all(s) for s in sinks))
            tokens = sum(1 for evs in streamed for e in evs if e.kind is EventKind.TOKEN)
            assert tokens == 4 * 24
            flushes = worker.outbox.num_flushes - flushes0
            decodes = worker.snapshot.num_decodes - decodes0
            # At most a few wake-ups per tick (after commands, before the decode, after
            # it), never one per token of every stream.
            assert flushes <= 3 * decodes + 4, (flushes, decodes)
            assert flushes < tokens / 2, (flushes, tokens)

            # A non-streaming request gets one event, carrying the whole text.
            whole = await engine.complete(prompts[0], params, incremental=False)
            events = await asyncio.wait_for(read_all(whole), 60)
            assert [e.kind for e in events] == [EventKind.DONE]
            assert events[0].text == "".join(e.text for e in streamed[0])
            assert events[0].stats is not None and events[0].stats.output_tokens == 24
        finally:
            await engine.stop()

    asyncio.run(scenario())
