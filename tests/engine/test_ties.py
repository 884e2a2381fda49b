"""Where a greedy answer asked again is given again exactly (`schedule.ties`, issue 23).

Measured on this CPU with SmolLM2-135M (`schedule.ties`): "chunks of 2, 8, 16, 31, 32,
33, 48 and 63 rows all gave every token again; chunks of 64 parted at a near-tie in 13
of 14 answers (the best logit led by 0.013 to 0.29); and after a 700-token prompt the
2-to-63-row chunks parted from the one-row answer in 4 of 6 answers, each time where the
lead was under 0.063."
"""

from __future__ import annotations

from juggler.engine.schedule.ties import (
    ANY,
    FEW,
    FEW_TIE,
    NEAR,
    NEAR_TIE,
    ONE,
    RISKY,
    TILE_ROWS,
    TILED,
    TILED_NEAR_TIE,
    exact_length,
    holds,
    planned_length,
    shape,
    tie_of,
)


def test_decodes_fall_into_the_shapes_whose_rounding_differs() -> None:
    assert shape(1) == ONE
    assert shape(2) == shape(TILE_ROWS - 1) == FEW
    assert shape(TILE_ROWS) == shape(512) == TILED


def test_a_token_is_tied_by_its_lead_and_the_shape_that_chose_it() -> None:
    """A wide lead holds in every shape; a near-tie chosen by 2 to 63 rows holds only
    there; a lead between the thresholds holds but in the tiled shape; the one-row and
    tiled paths depend on where the cells lie, so their near-ties hold nowhere."""
    assert tie_of(TILED_NEAR_TIE, 1) == tie_of(2.0, TILE_ROWS) == ANY
    assert tie_of(NEAR_TIE / 2, 8) == FEW_TIE
    assert tie_of(NEAR_TIE / 2, 1) == RISKY
    assert tie_of(NEAR_TIE, 1) == tie_of(NEAR_TIE, 8) == NEAR
    assert tie_of(NEAR_TIE, TILE_ROWS) == tie_of(0.0, TILE_ROWS) == RISKY
    assert all(holds(ANY, s) for s in (ONE, FEW, TILED))
    assert [holds(FEW_TIE, s) for s in (ONE, FEW, TILED)] == [False, True, False]
    assert [holds(NEAR, s) for s in (ONE, FEW, TILED)] == [True, True, False]
    assert not any(holds(RISKY, s) for s in (ONE, FEW, TILED))


def test_a_repeat_is_drafted_only_as_far_as_each_token_holds() -> None:
    """The draft of k tokens after `rows` other rows decides tokens 0..k (ties[k]: the
    token sampled after the draft) in a decode of rows + k rows."""
    wide = [ANY] * 100
    assert exact_length(wide, 1, 64) == 64  # no near-tie: as far as allowed, tiled
    assert exact_length(wide, 1, 10) == 10
    # A few-row near-tie keeps the decode under 64 rows (with 8 others: 55 drafts).
    few = [ANY] * 30 + [FEW_TIE] + [ANY] * 69
    assert exact_length(few, 1, 64) == TILE_ROWS - 2
    assert exact_length(few, 8, 64) == TILE_ROWS - 1 - 8
    assert exact_length([ANY] * 30 + [NEAR] + [ANY] * 69, 1, 64) == TILE_ROWS - 2
    # Past the near-tie a tiled decode may go: it is then not decided in this one.
    assert exact_length([ANY] * 70 + [FEW_TIE], 1, 64) == 64
    # A risky near-tie is decided only by the row after the draft: parting there wastes
    # no row. Next to decide: no draft.
    risky = [ANY] * 12 + [RISKY] + [ANY] * 87
    assert exact_length(risky, 1, 64) == 12
    assert exact_length([RISKY, *wide], 1, 64) == 0
    # A one-row near-tie beyond a few-row one: the first that does not hold decides.
    assert exact_length([ANY] * 5 + [FEW_TIE] + [ANY] * 3 + [RISKY] + wide, 1, 64) == 9
    # Ties shorter than the draft: the rest holds anywhere.
    assert exact_length([], 1, 40) == 40


def test_a_lone_repeat_ends_its_draft_where_the_next_one_can_tile() -> None:
    """Issue 23: records asked again, with near-ties that hold in a few rows at its
    seventh and eighth tokens, was drafted as far as it held (63 rows, then 96: 513 ms
    on 2 cores, `bench/bench_rows.py`: 63 rows 231 ms, 64 rows 184). Ending the first
    draft at the near-ties lets the next decode tile: 8 rows, then 129."""

    def cpu(rows: int) -> float:  # the few-row and the tiled curve, 900 cells deep
        return 0.0074 if rows == 1 else 0.0037 * rows if rows < TILE_ROWS else 0.0028 * rows

    ties = [ANY] * 6 + [NEAR, NEAR] + [ANY] * 151  # 158 tokens left, and the one after
    assert exact_length(ties, 1, 128) == TILE_ROWS - 2
    assert planned_length(ties, 1, 128, 158, 128, cpu) == 7  # decides tokens 0..7
    # Where rows cost alike in every shape, the longest exact draft.
    assert planned_length(ties, 1, 128, 158, 128, lambda r: 0.002 + 0.0037 * r) == TILE_ROWS - 2
    # With no near-tie ahead, tiled: the rest in two even decodes (not 129 rows, then
    # 30 in a few-row one); as long as allowed where one decode takes all the rest.
    assert planned_length([ANY] * 159, 1, 128, 158, 128, cpu) == 78
    assert planned_length([ANY] * 151, 1, 128, 150, 128, cpu) == 74
    assert planned_length([ANY] * 101, 1, 128, 100, 128, cpu) == 100
    # A risky near-tie is still decided only by the row after the draft.
    risky = [ANY] * 12 + [RISKY] + [ANY] * 146
    assert planned_length(risky, 1, 128, 158, 128, cpu) == exact_length(risky, 1, 128) == 12
    assert planned_length([RISKY, *ties], 1, 128, 158, 128, cpu) == 0
    # Near the answer's end: the rest in one decode.
    assert planned_length([ANY] * 21, 1, 128, 20, 128, cpu) == 20
