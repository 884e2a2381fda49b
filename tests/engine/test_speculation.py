"""Prompt-lookup speculative decoding (issue 16): the pure parts, and a worker on the
fake llama.cpp whose copying rule repeats what the sequence holds.

Issue 16: "Greedy output must be identical to non-speculative decoding; with sampling,
use the standard accept/reject rule so the output distribution is unchanged", "KV
rollback of rejected tokens (sequence-scoped, as seed 003 requires)", "an adaptive
draft length per sequence that backs off to zero when acceptance is low".
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.batch import Chunk, SeqWork, schedule
from juggler.engine.schedule.drafts import (
    PRIOR_ACCEPT,
    Acceptance,
    DecodeCost,
    NgramIndex,
    draft_length,
    expected_tokens,
)
from juggler.engine.schedule.messages import Complete, RequestDone
from juggler.engine.schedule.stream import EventKind, StreamEvent, StreamSink
from juggler.engine.worker.speculation import Speculation
from tests.engine.fake_llama import BOS
from tests.engine.rig import Rig, events


def run(test: Callable[[], Awaitable[object]]) -> object:
    return asyncio.run(test())  # type: ignore[arg-type]


# -- pure parts ------------------------------------------------------------------------
def test_the_index_drafts_what_followed_the_earlier_match_reaching_furthest_back() -> None:
    idx = NgramIndex([1, 2, 3, 4, 5, 9, 7, 2, 3, 4, 6, 1, 2, 3, 4])
    # "2 3 4" continued with 6 last, but "1 2 3 4" matches only the first occurrence.
    assert idx.draft(3) == ([5, 9, 7], 4)
    idx.extend([5])
    assert idx.draft(2) == ([9, 7], 5)
    assert NgramIndex([1, 2, 3]).draft(4) == ([], 0)  # never itself
    assert NgramIndex([1, 2, 3, 1, 2]).draft(4) == ([], 0)  # shorter than MIN_MATCH
    assert NgramIndex([5, 6, 7, 5, 6, 7]).draft(0) == ([], 0)


def test_equal_matches_draft_only_what_they_agree_on() -> None:
    idx = NgramIndex([1, 2, 3, 5, 8, 1, 2, 3, 5, 9, 1, 2, 3])
    assert idx.draft(3) == ([5], 3)
    assert NgramIndex([1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3]).draft(2) == ([], 0)


def test_templated_paragraphs_draft_from_the_one_being_quoted() -> None:
    """Issue 16: "answer a question by quoting from a 1-2k-token document". Paragraphs
    built from one template share every phrase but their names and numbers; the most
    recent "in the year" is the last paragraph's, the one matching back to the name is
    the quoted one."""
    doc: list[int] = []
    for topic in range(12):
        doc += [100 + topic, 7, 8, 9, 10, 11, 200 + topic, 12, 13, 14, 300 + topic, 15]
    idx = NgramIndex([*doc, 1, 103, 7, 8, 9, 10, 11])  # quoting paragraph 3
    assert idx.draft(5) == ([203, 12, 13, 14, 303], 6)
    idx.extend([203, 12, 13, 14])
    assert idx.draft(2) == ([303, 15], 10)


def test_acceptance_counts_kept_tokens_and_the_first_refused_one() -> None:
    a = Acceptance()
    assert a.rate == PRIOR_ACCEPT
    for _ in range(30):
        a.update(4, 4)
    assert a.rate > 0.97
    for _ in range(30):
        a.update(4, 1)  # one kept, one refused, two unobserved
    assert 0.45 < a.rate < 0.55


def test_propose_drafts_from_the_token_lists_within_its_room() -> None:
    """Issue 16: "an adaptive draft length per sequence". `propose` reads the sequence's
    tokens and its sampled token and returns the draft, at most `room` long; the caller
    appends it (the lists it was given are left as they were)."""
    tokens, pending = [1, 2, 3, 4, 5, 6, 7, 8] * 4, [1]
    draft = Speculation(max_len=8).propose(tokens, pending, 100, DecodeCost(), num_seqs=1)
    assert draft and draft == [2, 3, 4, 5, 6, 7, 8, 1][: len(draft)]
    assert tokens == [1, 2, 3, 4, 5, 6, 7, 8] * 4 and pending == [1]
    short = Speculation(max_len=8).propose(tokens, pending, 1, DecodeCost(), num_seqs=1)
    assert short == [2]
    assert Speculation(max_len=8).propose(tokens, pending, 0, DecodeCost(), num_seqs=1) == []
    assert Speculation(max_len=8).propose([5, 9, 7], [3], 100, DecodeCost(), num_seqs=1) == []


def test_drafts_are_only_as_long_as_they_pay() -> None:
    """2 cores, SmolLM2: a decode costs about 6 ms plus 5.5 ms a row."""
    one = dict(fixed_s=0.006, per_row_s=0.0055, num_seqs=1)
    assert draft_length(0.3, 8, **one) == 0  # rarely right: never worth a row
    assert 0 < draft_length(0.75, 8, **one) < draft_length(0.95, 8, **one)
    assert draft_length(1.0, 8, **one) == 8
    # Eight streams share the fixed cost: a draft row costs nearly a whole token there.
    eight = {**one, "num_seqs": 8}
    assert draft_length(0.75, 8, **eight) == 0
    assert draft_length(0.99, 8, **eight) >= 1
    # Where a decode is mostly fixed cost (a GPU), drafts pay much sooner.
    gpu = dict(fixed_s=0.010, per_row_s=0.0002, num_seqs=8)
    assert draft_length(0.6, 8, **gpu) >= 3
    assert expected_tokens(1.0, 3) == 4 and abs(expected_tokens(0.5, 1) - 1.5) < 1e-9


def test_decode_cost_learns_fixed_and_per_row_time() -> None:
    cost = DecodeCost()
    for _ in range(200):
        for rows in (1, 4, 8):
            cost.update(rows, 0.002 + 0.001 * rows)
    fixed, per_row = cost.fit()
    assert abs(fixed - 0.002) < 2e-4 and abs(per_row - 0.001) < 1e-4


def test_drafts_get_logit_rows_only_in_room_the_decoders_leave() -> None:
    work = [SeqWork(0, 5, True, num_draft=4), SeqWork(1, 1, True), SeqWork(2, 3, True, 2)]
    plan = schedule(work, max_tokens=16, max_prefill_chunk=8, free_cells=100)
    assert plan.chunks == (Chunk(0, 5, True, 5), Chunk(1, 1, True), Chunk(2, 3, True, 3))
    tight = schedule(work, max_tokens=5, max_prefill_chunk=8, free_cells=100)
    # Every decoder first, then drafts in plan order as far as they fit.
    assert tight.chunks == (Chunk(0, 3, True, 3), Chunk(1, 1, True), Chunk(2, 1, True))


# -- a worker on the fake --------------------------------------------------------------
async def generate(
    rig: Rig, prompt: list[int], n: int, *, temperature: float = 0.0, seed: int | None = None
) -> tuple[list[int], StreamEvent]:
    sink: StreamSink = rig.sink()
    params = SamplingParams(max_new_tokens=n, temperature=temperature, seed=seed)
    rig.worker.submit(Complete("r", rig.reply(), tuple(prompt), params, sink, 0.0))
    got: list[StreamEvent] = []
    for _ in range(400):
        await rig.tick()
        got += events(sink)
        s = rig.worker.table.get("r")
        if s is not None and s.has_seq:  # the KV holds exactly the session's tokens
            assert rig.ctx.tokens(s.seq_id) == s.tokens
        if got and got[-1].kind is not EventKind.TOKEN:
            break
    assert got[-1].kind is EventKind.DONE, got[-1]
    return [t for e in got if e.kind is EventKind.TOKEN for t in e.token_ids], got[-1]


PROMPT = [BOS, *b"the cat sat on the mat. the cat sat on the mat. the cat"]


def test_greedy_output_is_identical_with_far_fewer_decodes() -> None:
    async def go() -> None:
        plain, spec = Rig(copying=True), Rig(copying=True, speculative=True)
        out_plain, _ = await generate(plain, PROMPT, 40)
        out_spec, done = await generate(spec, PROMPT, 40)
        assert out_spec == out_plain and len(out_spec) == 40
        assert spec.ctx.num_decodes < plain.ctx.num_decodes / 3
        assert done.stats is not None and done.stats.output_tokens == 40

    run(go)


def test_sampled_output_is_the_same_draw_for_draw() -> None:
    """Each position is drawn once, from the same logits with the same generator, with or
    without drafts: the standard rule for a draft that proposes one token for sure. So
    outputs match seed for seed, and the distribution over seeds is the same."""

    async def go() -> None:
        plain_counts: collections.Counter[tuple[int, ...]] = collections.Counter()
        spec_counts: collections.Counter[tuple[int, ...]] = collections.Counter()
        for seed in range(40):
            plain = Rig(copying=True, stochastic=True)
            spec = Rig(copying=True, stochastic=True, speculative=True)
            a, _ = await generate(plain, PROMPT, 12, temperature=0.8, seed=seed)
            b, _ = await generate(spec, PROMPT, 12, temperature=0.8, seed=seed)
            assert a == b, seed
            plain_counts[tuple(a)] += 1
            spec_counts[tuple(b)] += 1
        assert len(plain_counts) > 5  # the seeds really sample different outputs
        assert plain_counts == spec_counts

    run(go)


def test_a_budget_or_an_end_inside_a_draft_stops_exactly_there() -> None:
    async def go() -> None:
        for n in (1, 2, 5, 9):
            plain, spec = Rig(copying=True), Rig(copying=True, speculative=True)
            want, _ = await generate(plain, PROMPT, n)
            got, done = await generate(spec, PROMPT, n)
            assert got == want and len(got) == n and done.finish_reason == "length"
        # "ab!ab" copies on into "!", after which comes the end: drafted past it, the
        # output still ends at the end token and the KV keeps nothing after "!".
        prompt = [BOS, *b"xyab!ab"]
        plain, spec = Rig(copying=True), Rig(copying=True, speculative=True)
        want, _ = await generate(plain, prompt, 20)
        got, done = await generate(spec, prompt, 20)
        assert got == want == [ord("!")] and done.finish_reason == "stop"

    run(go)


def test_rejected_drafts_leave_the_kv_as_without_speculation() -> None:
    """The default rule rarely repeats: drafts are proposed and mostly rejected. The
    output and the cells stay exact (checked every tick in `generate`)."""

    async def go() -> None:
        plain, spec = Rig(), Rig(speculative=True)
        prompt = [BOS, *b"abcabcabcabc"]
        want, _ = await generate(plain, prompt, 30)
        got, _ = await generate(spec, prompt, 30)
        assert got == want
        s = spec.worker.table.get("r")
        assert s is not None and spec.ctx.tokens(s.seq_id) == s.tokens
        stats = [n.stats for n in spec.notices if isinstance(n, RequestDone) and n.stats]
        assert stats and stats[-1].output_tokens == 30

    run(go)
