"""How far speculative drafts are kept (`Survival`), learned from the drafts a worker
and each of its sequences verify. Pure: no llama.cpp, no clock, no logging.

A draft is only worth its rows if its tokens are kept; `Survival` learns how far drafts
are kept, by how far back their match reaches (`match_class`) and by whether each draft
token follows a branch (`drafts.NgramIndex.branches`): a copy in progress is kept to its
end, a draft from the wrong record fails at its first value. `draft_length.best_length`
weighs what it expects to be kept against what the rows cost (`decode_cost`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

#: Matches are told apart by length for the acceptance estimate: a match reaching far
#: back is a copy in progress and far more often right than a short one.
MATCH_CLASSES = (6, 16, 40)
#: A draft token's chance of being refused (after every one before it was kept) until
#: drafts of its kind have been seen: for each class of `MATCH_CLASSES`, at a plain
#: token and at a branch (see `drafts.NgramIndex.branches`); then for drafts recalled from
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
    of draft token (plain, or after a branch: `drafts.NgramIndex.branches`), the chance that a
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
