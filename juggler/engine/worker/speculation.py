"""One generation's speculative decoding state, on its worker thread (the lookup is
`schedule.drafts`, the acceptance estimate `schedule.survival`, the cost model
`schedule.decode_cost` and the length that pays `schedule.draft_length`).

`Speculation.propose(tokens, pending, room, ...)` runs after a token was sampled for a
session (its only pending token), and when a generation begins on a prompt asked again
whose last rows are all that is pending (`batch.FINAL_ROWS`: its remembered answer is
then verified by the decode of those rows). It brings the n-gram index up to what the sequence
holds, looks up a draft (in the sequence's own tokens and in its worker's memory of recent generations run
with the same adapter, `schedule.recall`, whichever matches further back), decides how
much of it pays now (`draft_length.best_length`, from how often draft tokens like these, from
the same source after a match that long, plain or after a branch, were kept on this
sequence and on its worker, and what a decode of that many rows costs on this worker at
this depth; a greedy answer recalled for a greedy request is cut before a near-tie that
the decode's shape might decide otherwise than the decode that chose it,
`schedule.ties`, and a lone stream with no request waiting takes it that far) and
returns that; `Generations` appends it to the session's `pending` (`Session.num_draft`
says how many of the pending tokens are draft).
The decoder decodes the sampled token and the drafts in one chunk, samples each row in
order, and reports how many drafts the samples kept (`verified`). It reads token lists
only: it knows nothing of sessions.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from juggler.engine.schedule.decode_cost import LENGTHS, DecodeCost
from juggler.engine.schedule.draft_length import (
    CONFIRMED_CAP,
    DRAFT_CAP,
    FIRST_CAP,
    MIN_CAP,
    PROBE_EVERY,
    REPEAT_CAP,
    best_length,
)
from juggler.engine.schedule.drafts import MAX_MATCH, NgramIndex
from juggler.engine.schedule.recall import Recall
from juggler.engine.schedule.survival import REPEAT_CLASS, Survival, match_class
from juggler.engine.schedule.ties import ANY, TILE_ROWS, exact_length, planned_length


def has_room_beside(num_seqs: int) -> bool:
    """Whether a draft can fit beside `num_seqs` generating sequences: a decode beside
    other streams stays under `TILE_ROWS` rows (`Speculation.propose`), and each of them
    has a row."""
    return num_seqs <= 1 or TILE_ROWS - 1 - num_seqs > 0


@dataclass(eq=False)
class Speculation:
    max_len: int
    #: How far this sequence's drafts are kept (its worker's estimate as the prior).
    survival: Survival = field(default_factory=Survival)
    #: Built on the first draft (prompt and history), then extended token by token.
    index: NgramIndex | None = None
    #: Sampled tokens since a draft was last tried.
    since_draft: int = 0
    #: The longest draft this sequence may try now (see `draft_length.FIRST_CAP`).
    cap: int = FIRST_CAP
    #: The same for drafts of a greedy answer recalled for this greedy request (a
    #: request asked again; see `draft_length.REPEAT_CAP`).
    repeat_cap: int = REPEAT_CAP
    #: The tokens the pending draft is expected to keep (0: none pending).
    expected_kept: float = 0.0
    #: The worker's memory of recent generations, a second place drafts come from.
    recall: Recall | None = None
    #: Whether this generation draws greedily (a greedy answer recalled is then a repeat).
    greedy: bool = False
    #: The match class and token kinds of the pending draft (verified updates them).
    _drafted_class: int | None = None
    _drafted_branches: list[bool] = field(default_factory=list)

    def propose(
        self,
        tokens: list[int],
        pending: list[int],
        room: int,
        cost: DecodeCost,
        num_seqs: int,
        rows: int | None = None,
        others_kept: float = 0.0,
        depth: float = 0.0,
        *,
        alone: bool | None = None,
    ) -> list[int]:
        """The draft to append after the sampled token (`pending`, after the sequence's
        `tokens`): at most `room` tokens, what the generation and the sequence's cells
        still hold after it (empty: none). The next decode has `rows` rows without it
        (default: one per generating sequence) attending to `depth` cells on average,
        and the drafts already in it are expected to keep `others_kept` tokens. `alone`:
        the sequence is the only one generating and no request waits to start (default:
        `num_seqs` is 1)."""
        lone = num_seqs == 1 if alone is None else alone
        # A lone stream's repeat is planned over all the generation may still produce
        # (`ties.planned_length`); every other draft looks no further than it may go.
        left = room
        room = min(self.max_len, room)
        if num_seqs > 1:
            # Beside other streams a decode stays under `TILE_ROWS` rows: a tiled one
            # chooses, and writes the KV, otherwise than one of a few rows, and answers
            # given before then come out otherwise when asked again (`schedule.batch`).
            room = min(room, TILE_ROWS - 1 - max(num_seqs, rows or 0))
        if room <= 0:
            return []
        recall_room = left if lone else room
        self.since_draft += 1
        self._drafted_class = None
        self.expected_kept = 0.0
        index = self._index(tokens, pending)
        draft, match = index.draft(min(room, self.cap, DRAFT_CAP))
        recalled = repeat = confirmed = False
        ties: Sequence[int] = ()
        if self.recall is not None:
            said = self.recall.lookup(index.tokens, recall_room)
            # An earlier generation said this, from further back; or as far back as the
            # sequence's own text goes (both as far as a match is compared), a greedy
            # answer to a greedy request: then it is what this request said last time
            # (a prompt that repeats itself, asked again, drafts its answer, not more of
            # itself).
            if said.reach > match or (
                said.reach == match >= MAX_MATCH and said.greedy and self.greedy
            ):
                draft, match, recalled = said.draft, said.reach, True
                repeat = said.greedy and self.greedy
                ties = said.ties
                confirmed = said.confirmed
        cls = match_class(match, recalled, repeat)
        if cls != REPEAT_CLASS:
            bound = min(self.cap, DRAFT_CAP)
        elif confirmed and self.repeat_cap >= REPEAT_CAP:
            bound = CONFIRMED_CAP  # given twice the same: as far as its ties hold
        else:
            bound = self.repeat_cap
        recalled_len = len(draft)
        bound = min(bound, room)
        draft = draft[:bound]
        if not draft:
            return []
        if cls == REPEAT_CLASS:
            # A greedy answer asked again parts, if at all, at one of its near-ties.
            branches = [t != ANY for t in ties[: len(draft)]]
            branches += [False] * (len(draft) - len(branches))
        else:
            branches = index.branches(draft)
        lengths = [k for k in LENGTHS if k < len(draft)] + [len(draft)]
        kept = self.survival.kept(cls, branches, lengths)
        rows = max(1, num_seqs if rows is None else rows)
        want = best_length(
            kept, lengths, cost, rows=rows, num_seqs=num_seqs, others_kept=others_kept, depth=depth
        )
        lone_repeat = False
        if want == 0:
            # Now and then one token is tried anyway, so a sequence that starts quoting
            # after a while is noticed and the estimate follows it; not where even a draft
            # token sure to be kept would not pay for its row. Only a lone stream probes:
            # beside other streams the one-token draft just weighed had to clear the bar a
            # shared decode sets (`draft_length.SHARED_MARGIN`), and did not.
            if (
                self.since_draft < PROBE_EVERY
                or num_seqs > 1
                or not best_length([1.0], [1], cost, rows=rows, num_seqs=1, depth=depth)
            ):
                return []
            want = 1
        elif cls == REPEAT_CLASS and lone:
            # A lone stream's repeat goes as far as it holds (below), not to a length the
            # costs favour: its near-ties are known, and on a CPU fewer, larger decodes
            # cost less a row (a tiled one of 64 rows 3.0 ms a row, one of 62 3.7). Not
            # while requests wait to start: they would wait for that decode (the first
            # of a burst of 8 stories asked again bet 63 rows, 200-270 ms, while the
            # other 7 arrived).
            want, lone_repeat = len(draft), repeat
        if lone_repeat:
            # As far as each token is chosen again, at the length that with the draft
            # after it yields the answer fastest (`ties.planned_length`).
            table = cost.at(depth)
            want = planned_length(ties, rows, want, recalled_len, bound, table.seconds)
        elif repeat:
            # Only as far as each token is chosen again: a near-tie decided by a decode
            # shaped otherwise than the one that chose it goes either way (`ties`).
            want = exact_length(ties, rows, want)
        if repeat and want == 0:
            return []
        self.since_draft = 0
        self._drafted_class = cls
        # (a draft cut by its ties between two lengths weighed: the shorter one's)
        self.expected_kept = kept[bisect.bisect_right(lengths, want) - 1]
        self._drafted_branches = branches[:want]
        return draft[:want]

    def _index(self, tokens: list[int], pending: list[int]) -> NgramIndex:
        """The index, brought up to the sequence's tokens and its sampled token."""
        if self.index is None:
            self.index = NgramIndex(tokens)
        n, n_tokens = len(self.index), len(tokens)
        if n < n_tokens:
            self.index.extend(tokens[n:])
            n = n_tokens
        self.index.extend(pending[n - n_tokens :])
        return self.index

    def verified(self, drafted: int, accepted: int) -> None:
        """The pending draft was decoded: its first `drafted` tokens (those that fitted
        in the batch), of which the first `accepted` were kept."""
        self.expected_kept = 0.0
        if self._drafted_class is not None:
            branches = self._drafted_branches[:drafted]
            self.survival.update(self._drafted_class, branches, accepted)
        if accepted >= drafted:
            self.cap = max(self.cap, 2 * drafted)
        elif self._drafted_class == REPEAT_CLASS:
            self.repeat_cap = max(MIN_CAP, self.repeat_cap // 2, 2 * accepted)
        else:
            self.cap = max(MIN_CAP, self.cap // 2, 2 * accepted)
