"""Pure batch assembly: decode rows first, bounded prefill, round-robin, KV cell limits."""

from __future__ import annotations

from juggler.engine.schedule.batch import (
    FINAL_ROWS,
    BatchPlan,
    Chunk,
    SeqWork,
    exact_decodes,
    schedule,
)
from juggler.engine.schedule.ties import TILE_ROWS


def logit_owners(plan: BatchPlan) -> list[int]:
    """Sequence keys in the order of the logit rows the decode will produce."""
    return [c.key for c in plan.chunks if c.wants_logits]


def test_every_generating_session_gets_one_decode_row_with_logits() -> None:
    work = [SeqWork(k, 1, True) for k in range(8)]
    plan = schedule(work, max_tokens=512, max_prefill_chunk=256, free_cells=1000)
    assert plan.num_tokens == 8
    assert all(c.num_tokens == 1 and c.wants_logits for c in plan.chunks)
    assert sorted(logit_owners(plan)) == list(range(8))
    assert plan.deferred == ()


def test_long_prompt_is_chunked_and_does_not_starve_decoders() -> None:
    work = [SeqWork(0, 1, True), SeqWork(1, 1000, True), SeqWork(2, 1, True)]
    plan = schedule(work, max_tokens=512, max_prefill_chunk=128, free_cells=10_000)
    by_key = {c.key: c for c in plan.chunks}
    assert by_key[0] == Chunk(0, 1, True)
    assert by_key[2] == Chunk(2, 1, True)
    assert by_key[1] == Chunk(1, 128, False)  # not the last prompt token: no logits yet


def test_prefill_alone_may_use_the_whole_batch_but_chunks_stay_bounded() -> None:
    work = [SeqWork(0, 300, True), SeqWork(1, 300, True)]
    plan = schedule(work, max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert [c.num_tokens for c in plan.chunks] == [256, 256]


def test_last_prompt_chunk_requests_logits() -> None:
    plan = schedule(
        [SeqWork(3, 40, True)], max_tokens=512, max_prefill_chunk=256, free_cells=10_000
    )
    assert plan.chunks == (Chunk(3, 40, True),)
    assert logit_owners(plan) == [3]


def test_a_prompt_asked_again_decodes_its_drafts_beside_its_last_rows() -> None:
    """Issue 23: a prompt asked again is drafted from its remembered answer before its
    last `FINAL_ROWS` rows are decoded; the draft rows get logits as the last prompt row
    does, so the first decode already verifies the answer. A chunk that ends before the
    drafts has none; one that ends among them holds the drafts that fit."""
    drafted = SeqWork(5, FINAL_ROWS + 40, True, num_draft=40)
    plan = schedule([drafted], max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks == (Chunk(5, FINAL_ROWS + 40, True, 41),)
    # Beside a decoding stream, within the prefill budget: the drafts that fit.
    plan = schedule(
        [SeqWork(1, 1, True), drafted], max_tokens=512, max_prefill_chunk=32, free_cells=10_000
    )
    assert plan.chunks == (Chunk(1, 1, True), Chunk(5, 32, True, 32 - FINAL_ROWS + 1))
    # A longer prompt tail cut before its drafts: no logits yet, the drafts wait.
    long = SeqWork(6, 100 + 8, True, num_draft=8)
    plan = schedule([long], max_tokens=512, max_prefill_chunk=64, free_cells=10_000)
    assert plan.chunks == (Chunk(6, 64, False),)


def test_appended_input_without_generation_keeps_last_token_back() -> None:
    plan = schedule(
        [SeqWork(0, 10, False), SeqWork(1, 1, False)],
        max_tokens=512,
        max_prefill_chunk=256,
        free_cells=10_000,
    )
    assert plan.chunks == (Chunk(0, 9, False),)
    assert logit_owners(plan) == []


def test_generating_prefill_comes_before_appended_input() -> None:
    work = [SeqWork(0, 200, False), SeqWork(1, 200, True)]
    plan = schedule(work, max_tokens=256, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks[0].key == 1
    assert plan.num_tokens == 256


def test_full_batch_rotates_so_everyone_advances() -> None:
    work = [SeqWork(k, 1, True) for k in range(5)]
    seen: set[int] = set()
    for tick in range(5):
        plan = schedule(work, max_tokens=2, max_prefill_chunk=2, free_cells=100, start=tick)
        assert plan.num_tokens == 2
        assert len(plan.deferred) == 3
        seen.update(logit_owners(plan))
    assert seen == set(range(5))


def test_nothing_is_planned_beyond_free_kv_cells() -> None:
    work = [SeqWork(0, 1, True), SeqWork(1, 50, True)]
    plan = schedule(work, max_tokens=512, max_prefill_chunk=256, free_cells=10)
    assert plan.num_tokens == 10
    assert schedule(work, max_tokens=512, max_prefill_chunk=256, free_cells=0).is_empty
    assert set(schedule(work, max_tokens=512, max_prefill_chunk=256, free_cells=0).deferred) == {
        0,
        1,
    }


def test_a_plan_of_64_rows_or_more_chooses_its_tokens_in_a_decode_of_fewer() -> None:
    """Issue 23 (`schedule.batch`): a prompt's first answer chosen by the tiled decode
    that prefilled several prompts at once was chosen again, by few rows, otherwise:
    "such a repeat moved leads by up to 0.94 and came out otherwise in each of 4
    stories, and was bit for bit the same once the prompt's last rows were decoded by
    few rows the first time too". So the rows that choose a token go last, apart."""
    decoders = [Chunk(0, 1, True), Chunk(1, 5, True, 5)]  # a token; a token and 4 drafts
    prompts = [Chunk(2, 40, True), Chunk(3, 30, False), Chunk(4, 2, True)]
    silent, choosing = exact_decodes([*decoders, *prompts])
    assert silent == (Chunk(2, 40 - FINAL_ROWS, False), Chunk(3, 30, False))
    assert choosing == (*decoders, Chunk(2, FINAL_ROWS, True), Chunk(4, 2, True))
    assert sum(c.num_tokens for c in choosing) < TILE_ROWS
    # Under 64 rows, or nothing to set apart: one decode, as planned.
    few = [*decoders, Chunk(2, 40, True)]
    assert exact_decodes(few) == [tuple(few)]
    prefill = [Chunk(3, 300, False)]
    assert exact_decodes(prefill) == [tuple(prefill)]
    drafts = [Chunk(k, 16, True, 16) for k in range(5)]
    assert exact_decodes(drafts) == [tuple(drafts)]


def test_rows_that_choose_stay_few_where_several_sequences_choose() -> None:
    """Issue 23 (`schedule.batch`, policy 4): "the rows that choose stay under
    `TILE_ROWS` as long as trimming drafts can keep them there (the longest drafts are
    cut first)". A lone stream drafted 62 tokens before seven prompts asked again
    arrived: a 77-row tiled decode chose all their tokens otherwise than before."""
    lone = SeqWork(0, 1 + 62, True, num_draft=62)
    repeats = [SeqWork(k, FINAL_ROWS, True) for k in range(1, 8)]
    plan = schedule([lone, *repeats], max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks[0] == Chunk(0, 1 + 48, True, 1 + 48)
    assert plan.chunks[1:] == tuple(Chunk(k, FINAL_ROWS, True) for k in range(1, 8))
    assert sum(c.num_tokens for c in plan.chunks) == TILE_ROWS - 1
    assert exact_decodes(plan.chunks) == [plan.chunks]
    # The longest draft is cut first, as far as all must fit: 40 and 30 drafts beside
    # each other's token make 72 rows; 31 + 30 drafts and the two tokens make 63.
    two = [SeqWork(0, 41, True, num_draft=40), SeqWork(1, 31, True, num_draft=30)]
    plan = schedule(two, max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks == (Chunk(0, 32, True, 32), Chunk(1, 31, True, 31))
    # A drafted prompt's drafts are cut as a decoder's are.
    drafted = SeqWork(2, FINAL_ROWS + 60, True, num_draft=60)
    plan = schedule(
        [SeqWork(1, 11, True, num_draft=10), drafted],
        max_tokens=512,
        max_prefill_chunk=256,
        free_cells=10_000,
    )
    assert plan.chunks == (Chunk(1, 11, True, 11), Chunk(2, FINAL_ROWS + 50, True, 51))
    # Too many sequences for a few-row decode: no drafts beside them at all.
    many = [SeqWork(k, 3, True, num_draft=2) for k in range(70)]
    plan = schedule(many, max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks == tuple(Chunk(k, 1, True) for k in range(70))


def test_a_lone_sequence_keeps_the_tiled_decode_it_planned() -> None:
    """A lone stream's repeat plans tiled decodes (`ties.planned_length`): nothing else
    chooses a token in them, so they stay as planned, prompt rows that choose nothing
    beside them included."""
    lone = SeqWork(0, 1 + 100, True, num_draft=100)
    plan = schedule([lone], max_tokens=512, max_prefill_chunk=256, free_cells=10_000)
    assert plan.chunks == (Chunk(0, 101, True, 101),)
    plan = schedule(
        [lone, SeqWork(1, 300, False)], max_tokens=512, max_prefill_chunk=256, free_cells=10_000
    )
    assert plan.chunks[0] == Chunk(0, 101, True, 101)
    assert plan.chunks[1] == Chunk(1, 256, False)
