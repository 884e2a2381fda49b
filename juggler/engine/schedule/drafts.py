"""Prompt-lookup (n-gram) speculative decoding: where draft tokens come from, how long a
draft pays, and what a decode costs. Pure: no llama.cpp, no clock, no logging.

A generating sequence often repeats what it has seen: an answer quoting its document, a
code edit copying most of the file, JSON repeating its keys. So after each sampled
token the worker looks up the sequence's last tokens in everything the sequence holds
(prompt, session history, its own output) and, at the earlier occurrence that matches
furthest back, takes the tokens that followed as a draft. The draft goes into the next
decode beside the sampled token, each row with
logits; the worker then samples row by row and keeps drafts while they equal what it
sampled (see `worker.generation`). Sampling every position as usual and keeping a draft
token only when the draw equals it is the standard speculative rule for a draft that
proposes one token with certainty: the output distribution, greedy or not, is exactly
the model's.

How long a draft pays (`best_length`) depends on the hardware and on the text. Every
draft row costs compute; each draft token kept saves a later decode's share.
`DecodeCost` learns the time of a decode by its number of rows and the depth they attend
to from the decodes the worker runs (on 2 CPU cores with SmolLM2 after 700 cells,
`bench/bench_rows.py`: one row 7.2 ms, two 14.6 ms, 3.7 ms a row at 16 rows, 193 ms for
64; on a GPU extra rows are nearly free up to a point); `Survival` learns how far
drafts are kept, by how far back their match reaches and by whether each draft token
follows a branch (a copy in progress is kept to its end, a draft from the wrong record
fails at its first value). A draft is only proposed at the length that yields the most
tokens a second, and not at all when none saves, so open-ended text, where drafts are
rarely right, does not pay for rows the model throws away.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from juggler.engine.cache.prefix_cache import common_prefix_len
from juggler.engine.schedule.ties import TILE_ROWS

#: A draft needs the last `MIN_MATCH` tokens to have occurred before.
MIN_MATCH = 3
#: Matches are compared backwards up to this many tokens; longer ones count as equal.
MAX_MATCH = 64
#: Earlier occurrences of the last `MIN_MATCH` tokens compared, most recent first.
MAX_CANDIDATES = 256
#: Matches are told apart by length for the acceptance estimate: a match reaching far
#: back is a copy in progress and far more often right than a short one.
MATCH_CLASSES = (6, 16, 40)
#: A draft token's chance of being refused (after every one before it was kept) until
#: drafts of its kind have been seen: for each class of `MATCH_CLASSES`, at a plain
#: token and at a branch (see `NgramIndex.branches`); then for drafts recalled from
#: earlier generations (`schedule.recall`), matching less than the longest class, at
#: least that far back, and that far back in a greedy answer drafted for a greedy
#: request (a request asked again: it parts only at a near-tie). Recalled drafts are
#: kept apart: their fate says nothing of a sequence copying its own text (a worker that
#: served 24 samples of one prompt learned that recalled drafts fail, and must not
#: conclude that quotes do).
PRIOR_HAZARD = (
    (0.3, 0.5),
    (0.15, 0.35),
    (0.05, 0.25),
    (0.03, 0.2),
    (0.3, 0.5),
    (0.05, 0.25),
    (0.01, 0.1),
)
#: The class of a greedy answer recalled for a greedy request after a long match.
REPEAT_CLASS = len(PRIOR_HAZARD) - 1
#: Weight of that prior, in draft tokens seen.
PRIOR_WEIGHT = 4.0
#: Older observations fade by this factor per verified draft of their class.
DECAY = 0.95
#: Draft lengths weighed (besides all the match has, when shorter): the cost of a decode
#: is only known at the row counts decoded, so a few lengths are enough.
LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
#: A sequence's first draft is at most this long; each draft kept to its end lets the
#: next be twice as long, and a refused one halves the bound (or makes it twice what
#: was kept, if more; at least `MIN_CAP`). The estimates that size drafts are learned
#: across a worker's sequences, and a story served after a hundred quotes must not bet
#: fifty rows on them.
FIRST_CAP = 8
MIN_CAP = 4
#: A greedy answer recalled for a greedy request after a long match (a request asked
#: again) may be drafted this far from its first draft, not grown from `FIRST_CAP`: it
#: parts only at a near-tie, and on a CPU a decode of 64 rows or more costs less a row
#: than a shorter one (llama.cpp's flash attention tiles its query rows from 64 on:
#: `bench/bench_rows.py`). Where its near-ties lie, and which decode shapes give them
#: again, cuts it shorter (`schedule.ties`). The bound halves when such a draft is
#: refused, as `FIRST_CAP`'s does.
REPEAT_CAP = 64
#: A repeat whose answer came out the same when it was asked again (`recall.Recall.add`
#: confirms it) may be drafted this far, bounded by `--spec-draft-max`: its text held
#: in another decode's shapes, and a decode of 128 rows costs less a row than two of 64
#: (2.85 ms against 3.0 on 2 CPU cores). Where its ties stop it, it stops
#: (`schedule.ties`).
CONFIRMED_CAP = 128
#: Every other draft is at most this long, whatever `--spec-draft-max` allows: a draft
#: that is not an answer given before is not bet on a decode of more than 64 rows.
DRAFT_CAP = 64
#: The share of a draft's expected kept tokens that a decode shared by several sequences
#: does not count on: there the estimates run high (a story's 8 streams asked again
#: expected 81% of their repeats' draft tokens kept and kept 67%; their short recalled
#: matches expected 61% and kept 52%), and on a CPU a draft row costs nearly a token, so
#: drafts that paid on paper ran 0.78-0.93x as fast as none. A lone stream counts its
#: estimate whole: its repeats are kept whole and its probes must stay cheap to pass.
SHARED_DISCOUNT = 0.15
#: In a decode shared by several sequences a draft is only bet where it is expected to
#: keep its tokens at least this far from the share that pays even towards all of them.
#: There a kept token saves a sequence's share of the decode and a refused one costs a
#: whole row, so on a CPU the break-even is high: on 2 cores with SmolLM2 at 8 streams,
#: 3 to 16 draft rows pay even at 61-89% kept, one or two rows only at 88% or more
#: (`bench/bench_rows.py --streams 8 --depth 120`, two runs).
#: Near it, the measured costs (which vary with the host's load and the cells the batch
#: spans) cannot tell a paying draft from a losing one, and in a burst a draft kept by a
#: stream that finishes early saves less still: the burst lasts as long as its slowest
#: stream. At 8 streams writing stories, drafts that kept 40-70% of their tokens (a
#: remembered phrase, a short match in the story itself) made bursts 0.83-0.92x as fast
#: as none. Where rows are nearly free (a GPU) the break-even is low and so is the bar.
SHARED_MARGIN = 0.5
#: While drafts do not pay, a one-token draft is still tried this often (sampled tokens),
#: so that a sequence that starts to quote is noticed.
PROBE_EVERY = 16


_BRANCH = -1


class NgramIndex:
    """The tokens of one sequence and, for each `MIN_MATCH` tokens, every place they
    occurred with a token after them.

    A draft continues the earlier occurrence of the current suffix that matches it
    furthest back (ties: the most recent). Grounded text repeats itself in templated
    ways: twelve paragraphs that each say "was built in the year", a file whose methods
    all end in "return out". The most recent "in the year" is usually the wrong
    paragraph; the one whose match reaches back to "The harbor of Varenholm" is the one
    being quoted. Where two occurrences match equally far back and then go different
    ways, only what they agree on is drafted. A continuation that runs into the current
    end of the sequence goes on around it, as an overlapping copy does: text caught in a
    loop (a list that repeats its last item, a model repeating itself) is drafted as far
    as the loop goes on. `extend` is O(1) per token; `draft` compares at most
    `MAX_CANDIDATES` occurrences back to `MAX_MATCH` tokens each, and in practice stops
    within a few tokens for all but the right one. The last tokens never match
    themselves."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._at: dict[tuple[int, ...], list[int]] = {}
        #: For each `MIN_MATCH` tokens, the token that followed them, or `_BRANCH` once
        #: two different ones did.
        self._next: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        toks, at, nxt = self.tokens, self._at, self._next
        for t in tokens:
            end = len(toks)
            if end >= MIN_MATCH:
                key = tuple(toks[end - MIN_MATCH : end])
                at.setdefault(key, []).append(end)
                if nxt.setdefault(key, t) != t:
                    nxt[key] = _BRANCH
            toks.append(t)

    def branches(self, draft: list[int]) -> list[bool]:
        """For each token of `draft` (to follow the sequence's tokens), whether it comes
        after a branch: `MIN_MATCH` tokens that the sequence has continued in more than
        one way. Copying templated text, a model departs from its source at the values
        (a name, a number), which are branches; between them it rarely does."""
        ext = self.tokens[len(self.tokens) - MIN_MATCH :] + draft
        nxt = self._next
        return [nxt.get(tuple(ext[j : j + MIN_MATCH])) == _BRANCH for j in range(len(draft))]

    def follow(self, at: int, length: int) -> list[int]:
        """The `length` tokens from position `at` on, going on past the end as a copy of
        what it overlaps (`at` < len)."""
        out = self.tokens[at : at + length]
        period = len(self.tokens) - at
        while len(out) < length:
            out.extend(out[len(out) - period : len(out) - period + length - len(out)])
        return out

    def draft(self, max_len: int) -> tuple[list[int], int]:
        """Up to `max_len` tokens that followed the earlier occurrence of the current
        suffix that matches furthest back, and how far it matches (at most `MAX_MATCH`);
        ([], 0) if the last `MIN_MATCH` tokens never occurred before."""
        toks = self.tokens
        n = len(toks)
        if max_len <= 0 or n < MIN_MATCH:
            return [], 0
        found = self._at.get(tuple(toks[n - MIN_MATCH :]))
        if not found:
            return [], 0
        best_at, best_len = found[-1], 0
        tied: list[int] = []
        for at in reversed(found[-MAX_CANDIDATES:]):
            # toks[at - k] against toks[n - k] for k = MIN_MATCH + 1, ...
            limit = min(MAX_MATCH, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == toks[n - k - 1]:
                k += 1
            if k > best_len:
                best_at, best_len = at, k
                tied = []
            elif k == best_len:
                tied.append(at)
        draft = self.follow(best_at, max_len)
        for at in tied:
            # Two places match equally far back: draft only what both continue with.
            draft = draft[: common_prefix_len(draft, self.follow(at, len(draft)))]
            if not draft:
                return [], 0
        return draft, best_len


def match_class(match: int, recalled: bool = False, repeat: bool = False) -> int:
    """The class of a match `match` tokens long in the sequence's own text, or in the
    worker's memory of earlier generations when `recalled` (`repeat`: a greedy answer
    recalled for a greedy request), an index into `PRIOR_HAZARD`."""
    if not recalled:
        return bisect.bisect_right(MATCH_CLASSES, match)
    far = match >= MATCH_CLASSES[-1]
    return len(MATCH_CLASSES) + 1 + far + (far and repeat)


class Survival:
    """How far drafts are kept: for each class of match length (`match_class`) and kind
    of draft token (plain, or after a branch: `NgramIndex.branches`), the chance that a
    draft token is refused when every token before it was kept (a hazard), from decaying
    counts.

    Drafts are not kept token by token at a steady rate. Copying structured text, a
    model departs from its source where the source's template has a value (measured on
    greedy traces of `bench/spec_workloads.py`: one refusal in 50 at plain tokens, one in
    6 after a branch), so a draft through plain text is kept to its end and one that
    crosses several values is cut at the first it gets wrong. The expected number of
    tokens kept of a draft follows its own tokens' kinds.

    What an estimate has not seen is filled in by its prior, `PRIOR_WEIGHT` tokens'
    worth: `PRIOR_HAZARD` for the worker's estimate, the worker's estimate for one
    sequence's (so a sequence starts from what its worker has learned and moves towards
    its own drafts)."""

    def __init__(self, parent: Survival | None = None) -> None:
        self.parent = parent
        self.refused = [[0.0, 0.0] for _ in PRIOR_HAZARD]
        self.seen = [[0.0, 0.0] for _ in PRIOR_HAZARD]

    def hazards(self, cls: int) -> tuple[float, float]:
        """The hazard at a plain token and after a branch, for matches of class `cls`."""
        prior = self.parent.hazards(cls) if self.parent is not None else PRIOR_HAZARD[cls]
        refused, seen = self.refused[cls], self.seen[cls]
        w = PRIOR_WEIGHT
        return (
            (refused[0] + w * prior[0]) / (seen[0] + w),
            (refused[1] + w * prior[1]) / (seen[1] + w),
        )

    def update(self, cls: int, branches: list[bool], accepted: int) -> None:
        """A draft of class `cls` whose tokens' kinds were `branches` had its first
        `accepted` kept: each token up to the first refused one was seen, that one
        refused (those after it say nothing)."""
        if not branches:
            return
        if self.parent is not None:
            self.parent.update(cls, branches, accepted)
        refused, seen = self.refused[cls], self.seen[cls]
        for kind in (0, 1):
            refused[kind] *= DECAY
            seen[kind] *= DECAY
        for j in range(min(len(branches), accepted + 1)):
            seen[branches[j]] += 1.0
        if accepted < len(branches):
            refused[branches[accepted]] += 1.0

    def kept(self, cls: int, branches: list[bool], lengths: Iterable[int]) -> list[float]:
        """For each of `lengths` (ascending, at most the draft's), the expected number of
        tokens kept of the draft whose tokens' kinds are `branches`, cut to that length."""
        hazards = self.hazards(cls)
        keep = (1.0 - hazards[0], 1.0 - hazards[1])
        out: list[float] = []
        total, alive, pos = 0.0, 1.0, 0
        for k in lengths:
            while pos < k:
                alive *= keep[branches[pos]]
                total += alive
                pos += 1
            out.append(total)
        return out


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


def best_length(
    kept: list[float],
    lengths: list[int],
    cost: DecodeCost,
    *,
    rows: int,
    num_seqs: int,
    others_kept: float = 0.0,
    depth: float = 0.0,
) -> int:
    """Of `lengths` (ascending, with `kept[i]` draft tokens expected to be kept of a draft
    `lengths[i]` long), the one that makes the decode yield tokens fastest, or 0 when
    none is faster than no draft.

    The decode now has `rows` rows and yields a token for each of its `num_seqs`
    generating sequences, plus `others_kept` from the drafts already in it, in
    `seconds(rows)` (its rows attending to `depth` cells on average). A draft of k adds
    k rows and `kept` tokens.
    Whether a draft pays is the same question as whether the time it adds buys its kept
    tokens at a token's share of the decode, `seconds(rows) / num_seqs`; which length
    is best is not: the one that saves the most time in this decode may be longer than
    the one that yields the most tokens a second, where long drafts cost more a row."""
    table = cost.at(depth)  # one band for every length weighed
    base = table.seconds(rows)
    # What the decode yields already: a token for each sequence, and what the drafts that
    # other sequences proposed for it are expected to keep. Counting their rows but not
    # their tokens made a batch of eight quoting streams look so slow that every draft
    # seemed cheap (measured: quote at 8 streams 0.76x of no drafts).
    yielded = max(1, num_seqs) + others_kept
    best, best_rate = 0, yielded / base
    shared = num_seqs > 1
    trust = 1.0 - SHARED_DISCOUNT if shared else 1.0
    for k, e in zip(lengths, kept, strict=True):
        seconds = table.seconds(rows + k)
        if shared:
            # The share of its k tokens a draft must keep to pay even, and the bar above it.
            even = min(1.0, yielded * (seconds - base) / (base * k))
            if e < k * (even + SHARED_MARGIN * (1.0 - even)):
                continue
        rate = (yielded + trust * e) / seconds
        if rate > best_rate:
            best, best_rate = k, rate
    return best
