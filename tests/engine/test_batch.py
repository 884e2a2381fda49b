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
