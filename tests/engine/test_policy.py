"""A worker's pure KV-room decisions and request stats."""

from __future__ import annotations

from juggler.engine.llama.ports import ContextParams
from juggler.engine.llama.sampling import SamplingParams, StopMatcher
from juggler.engine.schedule.stream import StreamSink
from juggler.engine.worker.generation import request_stats
from juggler.engine.worker.policy import Admission, admit_stateless, room_error
from juggler.engine.worker.session import Generation
from tests.engine.fake_llama import FakeContext, FakeSampler, Faults


def test_a_stateless_prompt_is_admitted_while_it_fits_beside_live_sequences() -> None:
    fits = {"num_prompt": 30, "n_ctx": 64, "is_generating": False}
    assert admit_stateless(live_cells=33, **fits) is Admission.ADMIT  # 33 + 30 + 1 = 64
    assert admit_stateless(live_cells=34, **fits) is Admission.REFUSE


def test_a_stateless_prompt_that_does_not_fit_waits_only_while_others_generate() -> None:
    kw = {"live_cells": 40, "num_prompt": 30, "n_ctx": 64}
    assert admit_stateless(is_generating=True, **kw) is Admission.WAIT
    assert admit_stateless(is_generating=False, **kw) is Admission.REFUSE


def test_session_input_must_fit_its_sequence_and_the_shared_cells() -> None:
    assert room_error(held=10, num_new=10, live_cells=20, n_ctx=64) is None
    own = room_error(held=60, num_new=4, live_cells=60, n_ctx=64)
    assert own is not None and "per sequence (--ctx-size)" in own.message
    shared = room_error(held=10, num_new=10, live_cells=54, n_ctx=64)
    assert shared is not None and "KV cache is full" in shared.message
    assert shared.code == "context_length_exceeded"


def test_request_stats_count_prefill_reuse_and_token_gaps() -> None:
    ctx = FakeContext(ContextParams(64, 8, 8, 1, 1), Faults())
    g = Generation(
        params=SamplingParams(),
        sink=StreamSink(),
        sampler=FakeSampler(ctx, SamplingParams(), ()),
        max_new_tokens=8,
        t_arrival=1.0,
        prompt_tokens=10,
        stop=StopMatcher(()),
        num_generated=3,
        t_first=1.5,
        t_last=2.5,
        token_times=[1.5, 2.0, 2.5],
    )
    stats = request_stats(g, num_prefilled=4)
    assert (stats.input_tokens, stats.output_tokens) == (10, 3)
    assert (stats.prompt_tokens_prefilled, stats.prompt_tokens_reused) == (4, 6)
    assert stats.time_to_first_token == 0.5 and stats.tokens_per_second == 2.0
    assert stats.decode_token_times == (0.5, 0.5)
