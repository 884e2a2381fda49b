"""Continuous batching in a Worker on the fake context: round-robin fairness when the
batch is full, prefill in bounded chunks beside the decoders, and logit ownership."""

from __future__ import annotations

import asyncio
from collections import Counter

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import Complete
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
