"""The next decode's rows as drafts see them (issue 47): counted once after a decode and
kept as each sequence is handled, they are what a fresh count finds."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from juggler.engine.worker.next_rows import NextRows, count
from juggler.engine.worker.session import Session


@dataclass
class Spec:
    expected_kept: float


@dataclass
class Gen:
    spec: Spec | None


@dataclass(eq=False)
class Seq:
    """What `next_rows` reads of a session."""

    seq_id: int
    n_past: int
    generation: Gen | None
    num_draft: int = 0
    pending: list[int] = field(default_factory=list)


def running(seqs: list[Seq]) -> list[Session]:
    return cast(list[Session], [s for s in seqs if s.generation is not None])


@pytest.mark.parametrize("seed", range(20))
def test_the_sums_kept_are_the_sums_counted_afresh(seed: int) -> None:
    rng = random.Random(seed)
    seqs = []
    for i in range(rng.randint(2, 40)):
        spec = Spec(rng.random() * 3) if rng.random() < 0.8 else None
        gen = Gen(spec) if rng.random() < 0.9 else None
        s = Seq(i, rng.randint(1, 500), gen)
        if rng.random() < 0.2:  # not in this decode: pending input and drafts of its own
            s.pending = [1] * rng.randint(1, 5)
            s.num_draft = rng.randint(0, len(s.pending) - 1)
        seqs.append(s)
    decoded = [s for s in seqs if not s.pending]
    nxt = NextRows(running(seqs))
    for s in rng.sample(decoded, len(decoded)):
        # Handling its row: a token, maybe a rollback, then a draft or the end.
        if s.generation is not None:
            s.pending = [7]
            s.n_past += rng.randint(-2, 3)
            me = cast(Session, s)
            fresh, kept = count(me, running(seqs)), nxt.seen_by(me)
            assert kept[:3] == fresh[:3]
            assert kept.others_kept == pytest.approx(fresh.others_kept)
            if rng.random() < 0.15:
                s.generation = None
                s.pending = []
            else:
                s.num_draft = rng.randint(0, 4)
                s.pending += [3] * s.num_draft
        nxt.record(cast(Session, s))
    nxt_again = NextRows(running(seqs))
    assert (nxt.rows, nxt.cells) == (nxt_again.rows, nxt_again.cells)


def test_a_session_not_counted_yet_is_one_more_sequence() -> None:
    a, b = Seq(1, 10, Gen(None)), Seq(2, 20, Gen(Spec(1.0)))
    nxt = NextRows(running([a]))
    b.pending = [5, 6]
    seen = nxt.seen_by(cast(Any, b))
    assert seen == count(cast(Any, b), running([a, b]))
    assert seen.num_seqs == 2 and seen.rows == 1 + 2 and seen.cells == 10 + 2 * 20
