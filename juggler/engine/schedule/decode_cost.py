"""What a decode costs (`DecodeCost`): its time by the number of rows and the depth
they attend to, learned from the decodes a worker runs. Pure: no llama.cpp, no clock (the
worker measures and reports), no logging.

On 2 CPU cores with SmolLM2 after 700 cells (`bench/bench_rows.py`): one row 7.2 ms, two
14.6 ms, 3.7 ms a row at 16 rows, 193 ms for 64; on a GPU extra rows are nearly free up
to a point. `draft_length.best_length` prices a draft's rows with it.
"""

from __future__ import annotations

import bisect
import math

from juggler.engine.schedule.ties import TILE_ROWS

#: Draft lengths weighed (besides all the match has, when shorter), and the buckets of
#: row counts past `EXACT_ROWS` that decodes are timed by: the cost of a decode is only
#: known at the row counts decoded, so a few lengths are enough.
LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

#: Decodes of up to this many rows are timed per row count, larger ones per bucket of
#: `LENGTHS` (then doubling). A decode's time is not smooth in its rows: on 2 CPU cores
#: with SmolLM2, 8 sequences of one row took 28.4 ms, with one draft row more 33.1, two
#: 36.7, four 40.3, eight 48.3 (`bench/bench_rows.py --streams 8`). One bucket for 9 to
#: 12 rows read the ninth row at 2.8 ms where it cost 4.7, and at 8 streams one-token
#: drafts and probes that cannot pay were bet on every few tokens.
EXACT_ROWS = 32
#: Depths (the cells a decode's rows attend to) whose decodes share a cost table: below
#: `DEPTH_START`, then bands each `DEPTH_RATIO` times the last.
DEPTH_START = 256
DEPTH_RATIO = math.sqrt(2.0)


def depth_band(depth: float) -> int:
    """The band of `depth` cells: 0 below `DEPTH_START`, then 1, 2, ... per ratio."""
    if depth < DEPTH_START:
        return 0
    return 1 + int(math.log(depth / DEPTH_START, DEPTH_RATIO))


class RowCosts:
    """Decode time by the number of rows, at one band of depths (see `DecodeCost`).

    The time is kept per row count up to `EXACT_ROWS`, then per bucket of them (`LENGTHS`,
    then doubling), as decaying means of the rows and seconds measured there, and read
    between buckets by straight lines. Past the largest bucket known it is extrapolated at half the last slope: an
    optimistic guess, so that a long draft that may pay is tried once and its bucket
    measured, rather than never tried because nothing was known.

    A band starts from made-up defaults (the first band) or from a copy of another
    band's table; each such entry gives way to the first measurement of its bucket, and
    once two buckets are measured here only those are read (past them, the optimistic
    guess): a copy from a deeper band prices every row too dear, and a bucket priced too
    dear is never tried, so never measured.

    Decodes of fewer than `TILE_ROWS` rows and decodes of more are two curves, not one:
    llama.cpp's CPU flash attention tiles its query rows from 64 on, and deep in a
    sequence that makes 64 rows cheaper than 63 (2 cores, SmolLM2, 900 cells: 63 rows
    231 ms, 64 rows 184, `bench/bench_rows.py`). So no bucket holds both (the last
    below the tile is `TILE_ROWS - 1`), each curve is kept rising on its own
    (`points`), and a decode is read on its own curve: a few-row one on the few-row
    curve only, a tiled one on the tiled curve (below its first point, along the line
    from the last few-row point). Read as one rising curve, 64 rows were priced as 63,
    and a repeat was drafted 63 + 96 rows where 9 + 129 yield more a second."""

    #: Weight of a new measurement in its bucket's means.
    ALPHA = 0.2
    #: A bucket that says fewer rows cost more than a later one measured this many times
    #: as often is an outlier (see `points`).
    OUTLIER_RATIO = 4

    def __init__(self, fixed_s: float = 0.006, per_row_s: float = 0.0055) -> None:
        self._rows: dict[int, float] = {}
        self._secs: dict[int, float] = {}
        self._points: tuple[list[float], list[float]] | None = None
        #: Where the tiled curve starts in `_points` (see `points`).
        self._tiled_from = 0
        # Seeded with two made-up decodes that say the defaults: one real decode replaces
        # the seed of its bucket, and the first real decode of more than one row both.
        self._seeded: set[int] = set()
        #: The buckets measured in this band (the others are seeds or borrowed), and how
        #: many decodes each was measured by.
        self._own: set[int] = set()
        self._count: dict[int, int] = {}
        for rows in (1, 9):
            b = self._bucket(rows)
            self._seeded.add(b)
            self._rows[b] = float(rows)
            self._secs[b] = fixed_s + per_row_s * rows

    def borrow(self) -> RowCosts:
        """A copy for another band: every entry gives way to its first measurement there."""
        copy = RowCosts()
        copy._rows, copy._secs = dict(self._rows), dict(self._secs)
        copy._seeded = set(self._seeded)
        return copy

    @staticmethod
    def _bucket(rows: int) -> int:
        if rows <= EXACT_ROWS:
            return rows
        if rows < TILE_ROWS:
            return min(LENGTHS[bisect.bisect_left(LENGTHS, rows)], TILE_ROWS - 1)
        if rows <= LENGTHS[-1]:
            return LENGTHS[bisect.bisect_left(LENGTHS, rows)]
        return 1 << (rows - 1).bit_length()

    def update(self, rows: int, seconds: float) -> None:
        b = self._bucket(rows)
        self._points = None
        if self._seeded and rows > 1:
            for seed in self._seeded - {1}:
                del self._rows[seed], self._secs[seed]
            self._seeded &= {1}
        self._count[b] = self._count.get(b, 0) + 1
        if b not in self._own:
            self._own.add(b)
            self._seeded.discard(b)
            self._rows[b], self._secs[b] = float(rows), seconds
            return
        a = self.ALPHA
        self._rows[b] += a * (rows - self._rows[b])
        self._secs[b] += a * (seconds - self._secs[b])

    def points(self) -> tuple[list[float], list[float]]:
        """The rows and seconds known, by rows, each time at least the one before on the
        same curve (fewer than `TILE_ROWS` rows, or more; see the class doc).

        Where more rows took less time than fewer, the fewer are read as dear as them,
        unless the fewer were measured by far fewer decodes (`OUTLIER_RATIO`): then they
        are a decode slowed by the host and give way, read between their neighbours. A
        burst's requests parsed on the same 2 cores made one 7-row decode take 40 ms
        beside hundreds of 8-row ones of 36; raising the later buckets to it made 7 to 8
        rows, and at one point 8 to 12, cost nothing, and every draft there seemed to
        pay."""
        if self._points is None:
            known = self._own if len(self._own) >= 2 else self._rows.keys()
            curves: list[list[tuple[float, float, int]]] = [[], []]
            for b in sorted(known, key=self._rows.__getitem__):
                r, t, n = self._rows[b], self._secs[b], self._count.get(b, 0)
                kept = curves[r >= TILE_ROWS]
                if kept and r <= kept[-1][0]:
                    continue
                while kept and kept[-1][1] > t and kept[-1][2] * self.OUTLIER_RATIO <= n:
                    kept.pop()
                kept.append((r, max(t, kept[-1][1]) if kept else t, n))
            few, tiled = curves
            self._tiled_from = len(few)
            self._points = ([r for r, _, _ in few + tiled], [t for _, t, _ in few + tiled])
        return self._points

    def seconds(self, rows: int) -> float:
        """The estimated time of a decode of `rows` rows, read on its curve."""
        xs, ys = self.points()
        if rows < TILE_ROWS and 0 < self._tiled_from < len(xs):
            xs, ys = xs[: self._tiled_from], ys[: self._tiled_from]  # the few-row curve
        i = bisect.bisect_left(xs, rows)
        if i == 0:
            return ys[0] * rows / xs[0]
        if i < len(xs):
            r0, t0, r1, t1 = xs[i - 1], ys[i - 1], xs[i], ys[i]
            return t0 + (t1 - t0) * (rows - r0) / (r1 - r0)
        r0, t0 = xs[-1], ys[-1]
        # Past the last point: half the slope of the last two on its curve.
        on_curve = len(xs) >= 2 and (xs[-2] >= TILE_ROWS) == (r0 >= TILE_ROWS)
        slope = (t0 - ys[-2]) / (r0 - xs[-2]) if on_curve else t0 / r0
        return t0 + 0.5 * slope * (rows - r0)


class DecodeCost:
    """Decode time by the number of rows and the depth they attend to, learned from the
    decodes the worker runs.

    The time is not a line in rows: on 2 CPU cores with SmolLM2 the second row costs
    nearly as much as the first (10.8 and 20.6 ms), each further one about 5.5 ms
    (`bench/bench_rows.py`); on a GPU extra rows are almost free up to a point. Nor is
    it the same at every depth: each row attends to every cell of its sequence, and
    after 300 cells 48 rows take 191 ms, after 1,600 cells 407 ms, while 64 rows (which
    llama.cpp's flash attention tiles) take 231 and 370 ms. A worker serves prompts of
    every length; one table for all of them let a long code prompt's decodes price a
    short table quote's drafts at nearly twice their cost (issue 23: drafts of 24 where
    64 paid). So each band of depths (`depth_band`) keeps its own `RowCosts`; a band
    seen for the first time starts from a copy of the nearest band known (the shallower
    on a tie: the optimistic one) until it has measurements of its own."""

    def __init__(self, fixed_s: float = 0.006, per_row_s: float = 0.0055) -> None:
        self._defaults = (fixed_s, per_row_s)
        self._bands: dict[int, RowCosts] = {}

    def at(self, depth: float) -> RowCosts:
        """The table of decodes whose rows attend to `depth` cells on average."""
        band = depth_band(depth)
        table = self._bands.get(band)
        if table is None:
            if self._bands:
                near = min(self._bands, key=lambda b: (abs(b - band), b))
                table = self._bands[near].borrow()
            else:
                table = RowCosts(*self._defaults)
            self._bands[band] = table
        return table

    def update(self, rows: int, seconds: float, depth: float = 0.0) -> None:
        """A decode of `rows` rows whose rows attend to `depth` cells on average took
        `seconds`."""
        self.at(depth).update(rows, seconds)

    def seconds(self, rows: int, depth: float = 0.0) -> float:
        """The estimated time of a decode of `rows` rows at `depth` cells."""
        return self.at(depth).seconds(rows)
