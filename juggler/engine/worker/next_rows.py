"""The next decode's rows as the drafts proposed after one decode see them (issue 47).

A draft is sized against the decode it will join (`speculation.Speculation.propose`):
how many rows it has so far (a token for each generating sequence, and the drafts
already proposed), the cells they attend to, and how many draft tokens the others are
expected to keep. `Drafting.propose` summed those over every generating sequence for
each sequence's every token: with 32 streams on a worker, a thousand sessions visited
per decode, a fifth of the time the worker held Python's lock (the host-bound test model,
64 streams on two workers). `NextRows` takes the sums once after a decode and keeps
them as each sequence is sampled and drafts: only the sequence being handled changes
while a decode's rows are handled (its token, its drafts, its rollback, its end), so
`record` after each keeps the sums what a fresh count would find. Pure; owned by the
worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from juggler.engine.worker.session import Session


class Seen(NamedTuple):
    """What the next decode holds besides one sequence's own pending rows, with them."""

    num_seqs: int
    rows: int
    cells: int
    others_kept: float


def _share(s: Session) -> tuple[int, int, float]:
    """`s`'s rows in the next decode as the others see them (its token and drafts),
    the cells those rows attend to, and the tokens its drafts are expected to keep."""
    n = 1 + s.num_draft
    g = s.generation
    kept = g.spec.expected_kept if s.num_draft and g is not None and g.spec is not None else 0.0
    return n, n * s.n_past, kept


class NextRows:
    def __init__(self, running: Iterable[Session]) -> None:
        self._shares: dict[int, tuple[int, int]] = {}
        self._kept: dict[int, float] = {}
        self.rows = 0
        self.cells = 0
        self.kept = 0.0
        for s in running:
            self.record(s)

    def record(self, s: Session) -> None:
        """`s` as it is now (gone from the sums when it no longer generates)."""
        key = s.seq_id
        old = self._shares.pop(key, None)
        if old is not None:
            self.rows -= old[0]
            self.cells -= old[1]
        self.kept -= self._kept.pop(key, 0.0)
        if not self._kept:
            self.kept = 0.0  # no rounding left over from what was taken away
        if s.generation is None:
            return
        rows, cells, kept = _share(s)
        self._shares[key] = (rows, cells)
        self.rows += rows
        self.cells += cells
        if kept:
            self._kept[key] = kept
            self.kept += kept

    def seen_by(self, s: Session) -> Seen:
        """The sums with `s`'s own share replaced by its pending rows now (its sampled
        token, or a prompt's last rows), as `Drafting.propose` weighs a draft for `s`."""
        key = s.seq_id
        own = self._shares.get(key)
        num_seqs = len(self._shares) + (own is None)
        own = own or (0, 0)
        n = len(s.pending)
        others = self.kept - self._kept.get(key, 0.0) + _share(s)[2]
        return Seen(num_seqs, self.rows - own[0] + n, self.cells - own[1] + n * s.n_past, others)


def count(s: Session, running: Iterable[Session]) -> Seen:
    """The same sums, counted afresh over `running` (outside a decode's rows)."""
    num_seqs, rows, cells, others = 0, 0, 0, 0.0
    for r in running:
        num_seqs += 1
        n, c, kept = _share(r)
        if r is s:
            n = len(r.pending)
            c = n * r.n_past
        rows += n
        cells += c
        others += kept
    return Seen(num_seqs, rows, cells, others)
