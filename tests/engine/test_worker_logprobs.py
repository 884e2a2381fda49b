"""Log-probabilities travel with each sampled token through the worker to the stream,
and a non-streaming request gets them all in its one final event."""

from __future__ import annotations

import asyncio
import math

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import Complete
from juggler.engine.schedule.stream import EventKind, StreamSink
from tests.engine.fake_llama import BOS, N_VOCAB, greedy
from tests.engine.rig import Rig, events

#: The fake's logits are 1.0 at its greedy token and 0 elsewhere.
GREEDY_LOGPROB = 1.0 - math.log(math.e + N_VOCAB - 1)
OTHER_LOGPROB = -math.log(math.e + N_VOCAB - 1)


def test_each_token_event_carries_its_logprob_and_the_best_rivals() -> None:
    async def go() -> None:
        rig = Rig()
        sink = rig.sink()
        params = SamplingParams(max_new_tokens=4, temperature=0.0, top_logprobs=2)
        prompt = (BOS, *b"ab")
        rig.worker.submit(Complete("r", rig.reply(), prompt, params, sink, 0.0))
        await rig.tick(6)
        evs = [e for e in events(sink) if e.kind is EventKind.TOKEN]
        expected = greedy(prompt, 4)
        assert [lp.token for e in evs for lp in e.logprobs] == expected
        for e in evs:
            (lp,) = e.logprobs
            assert lp.logprob == pytest.approx(GREEDY_LOGPROB)
            assert lp.top[0] == (lp.token, pytest.approx(GREEDY_LOGPROB))
            assert lp.top[1][1] == pytest.approx(OTHER_LOGPROB)

    asyncio.run(go())


def test_no_logprobs_unless_asked_and_all_at_once_when_not_streaming() -> None:
    async def go() -> None:
        rig = Rig()
        plain, whole = rig.sink(), StreamSink(incremental=False)
        prompt = (BOS, *b"xy")
        rig.worker.submit(
            Complete("a", rig.reply(), prompt, SamplingParams(max_new_tokens=3), plain, 0.0)
        )
        asked = SamplingParams(max_new_tokens=3, top_logprobs=0)
        rig.worker.submit(Complete("b", rig.reply(), prompt, asked, whole, 0.0))
        await rig.tick(6)
        assert all(not e.logprobs for e in events(plain))
        (done,) = events(whole)
        assert done.kind is EventKind.DONE
        assert [lp.token for lp in done.logprobs] == list(done.token_ids) == greedy(prompt, 3)
        assert all(lp.top == () for lp in done.logprobs)

    asyncio.run(go())
