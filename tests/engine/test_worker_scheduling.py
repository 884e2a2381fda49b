"""Continuous batching in a Worker on the fake context: round-robin fairness when the
batch is full, prefill in bounded chunks beside the decoders, and logit ownership."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import Complete, Notice, RequestDone
from juggler.engine.schedule.stream import EventKind, StreamSink
from tests.engine.fake_llama import BOS, greedy
from tests.engine.rig import Rig, events


def submit_complete(rig: Rig, rid: str, prompt: list[int], n: int) -> StreamSink:
    sink = rig.sink()
    params = SamplingParams(max_new_tokens=n, temperature=0.0)
    rig.worker.submit(Complete(rid, rig.reply(), tuple(prompt), params, sink, 0.0))
    return sink


def generated(sink: StreamSink) -> list[int]:
    return [t for e in events(sink) if e.kind is EventKind.TOKEN for t in e.token_ids]


def test_a_full_batch_takes_turns_so_every_stream_advances_equally() -> None:
    async def go() -> None:
        # One-token prompts: all four streams decode from the first tick, two at a time.
        rig = Rig(n_batch=2, n_seq_max=4)
        sinks = [submit_complete(rig, f"r{i}", [ord("a") + i], 100) for i in range(4)]
        for _ in range(3):
            before = rig.ctx.num_decodes
            await rig.tick(4)
            batches = rig.ctx.decoded[before:]
            assert [len(b) for b in batches] == [2, 2, 2, 2]
            assert Counter(r.seq_id for b in batches for r in b) == {0: 2, 1: 2, 2: 2, 3: 2}
        for i, sink in enumerate(sinks):
            assert generated(sink) == greedy([ord("a") + i], 6)

    asyncio.run(go())


def test_a_long_prompt_is_prefilled_in_chunks_while_the_others_keep_decoding() -> None:
    async def go() -> None:
        rig = Rig(n_batch=64, prefill_chunk=16)
        short = submit_complete(rig, "short", [BOS, *b"hi"], 50)
        await rig.tick(2)
        seq_short = rig.worker.table.get("short")
        assert seq_short is not None and seq_short.generation is not None
        long_prompt = [BOS, *(b"x" * 99)]
        long = submit_complete(rig, "long", long_prompt, 3)
        before = rig.ctx.num_decodes
        await rig.tick(7)
        batches = rig.ctx.decoded[before:]
        for batch in batches:
            mine = [r for r in batch if r.seq_id == seq_short.seq_id]
            theirs = [r for r in batch if r.seq_id != seq_short.seq_id]
            assert len(mine) == 1 and mine[0].logits, "one decode row each tick"
            assert 0 < len(theirs) <= 16, "prefill stays within its chunk"
        prefilled = sum(1 for b in batches for r in b if r.seq_id != seq_short.seq_id)
        assert prefilled == len(long_prompt)
        assert [r.logits for r in batches[-1] if r.seq_id != seq_short.seq_id][-1]
        assert len(generated(short)) == 2 + 7
        await rig.tick(3)
        assert generated(long) == greedy(long_prompt, 3)

    asyncio.run(go())


def test_each_logit_row_goes_to_the_session_that_owns_it() -> None:
    async def go() -> None:
        rig = Rig(n_batch=64)
        prompts = [[BOS, *w] for w in (b"one", b"three", b"fifteen")]
        sinks = [submit_complete(rig, f"r{i}", p, 6) for i, p in enumerate(prompts)]
        await rig.tick(8)
        first = rig.ctx.decoded[0]
        assert len(first) == sum(len(p) for p in prompts), "all three prefilled together"
        assert [r.logits for r in first].count(True) == 3, "logits only for last prompt rows"
        for prompt, sink in zip(prompts, sinks, strict=True):
            assert generated(sink) == greedy(prompt, 6)

    asyncio.run(go())


def test_a_lone_stream_decodes_without_planning_until_a_command_comes() -> None:
    """A stream decoding alone gets the same one-row decodes without the planning step
    (issue 23: a lone stream's host time per token); a new request ends that at once and
    is batched beside it from the next tick."""

    async def go() -> None:
        rig = Rig(n_batch=64)
        decoder = rig.worker.decoder
        planned = 0
        run = decoder.run

        def counting_run(tick: int) -> Any:
            nonlocal planned
            planned += 1
            return run(tick)

        decoder.run = counting_run  # type: ignore[method-assign]
        first_prompt = [BOS, *b"hi"]
        first = submit_complete(rig, "first", first_prompt, 40)
        await rig.tick(3)
        assert decoder.lone is rig.worker.table.get("first")
        planned, before = 0, rig.ctx.num_decodes
        await rig.tick(5)
        assert planned == 0, "a lone stream's ticks skip the planning"
        assert [len(b) for b in rig.ctx.decoded[before:]] == [1] * 5

        second_prompt = [BOS, *b"yo"]
        second = submit_complete(rig, "second", second_prompt, 4)
        before = rig.ctx.num_decodes
        await rig.tick(3)
        assert planned == 3 and decoder.lone is None
        seqs = [{r.seq_id for r in b} for b in rig.ctx.decoded[before:]]
        assert all(len(s) == 2 for s in seqs), "the new request is batched beside it"
        await rig.tick(4)
        assert generated(second) == greedy(second_prompt, 4)
        await rig.tick(40)
        assert generated(first) == greedy(first_prompt, 40)

    asyncio.run(go())


def test_a_lone_stream_is_still_cancelled_and_ended_on_time() -> None:
    async def go() -> None:
        rig = Rig(n_batch=64)
        sink = submit_complete(rig, "r", [BOS, *b"hi"], 40)
        await rig.tick(4)
        assert rig.worker.decoder.lone is not None
        sink.cancel()
        await rig.tick()
        got = events(sink)
        assert got[-1].kind is EventKind.DONE and got[-1].finish_reason == "cancelled"
        session = rig.worker.table.get("r")
        assert session is None or session.generation is None

    asyncio.run(go())


def test_a_finished_request_reaches_the_loop_before_the_snapshot_that_shows_it_ended() -> None:
    """/metrics reads a worker's snapshot (requests running) beside the master's totals
    (filled by each `RequestDone`): a scrape between the two once saw no request running
    and the first-token histogram one short. The snapshot now travels behind the notice."""

    async def go() -> None:
        rig = Rig(n_batch=64)
        running_when_done: list[int] = []
        deliver = rig.worker._deliver

        def watching(notice: Notice) -> None:
            if isinstance(notice, RequestDone):
                running_when_done.append(rig.worker.snapshot.num_running)
            deliver(notice)

        rig.worker._deliver = watching
        sink = submit_complete(rig, "r", [BOS, *b"hi"], 5)
        await rig.tick(8)
        assert events(sink)[-1].kind is EventKind.DONE
        assert running_when_done == [1], "the loop saw it ended before its stats came"
        assert rig.worker.snapshot.num_running == 0

    asyncio.run(go())
