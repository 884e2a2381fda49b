"""One generation's speculative decoding state, on its worker thread (the lookup, the
acceptance estimate and the cost model are `schedule.drafts`).

`Speculation.propose(tokens, pending, room, ...)` runs after a token was sampled for a
session (its only pending token): it brings the n-gram index up to what the sequence
holds, looks up a draft, decides how much of it pays now (`drafts.draft_length`, from how
often this sequence's drafts from matches that long were kept and what a decode costs on
this worker) and returns that; `Generations` appends it to the session's `pending`
(`Session.num_draft` says how many of the pending tokens are draft). The decoder decodes
the sampled token and the drafts in one chunk, samples each row in order, and reports
how many drafts the samples kept (`verified`). It reads token lists only: it knows
nothing of sessions.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from juggler.engine.schedule.drafts import (
    MATCH_CLASSES,
    PROBE_EVERY,
    Acceptance,
    DecodeCost,
    NgramIndex,
    draft_length,
)


@dataclass(eq=False)
class Speculation:
    max_len: int
    #: How often draft tokens are kept, for each class of match length (`MATCH_CLASSES`:
    #: a draft whose match reaches far back is right far more often).
    acceptance: tuple[Acceptance, ...] = field(
        default_factory=lambda: tuple(Acceptance() for _ in range(len(MATCH_CLASSES) + 1))
    )
    #: Built on the first draft (prompt and history), then extended token by token.
    index: NgramIndex | None = None
    #: Sampled tokens since a draft was last tried.
    since_draft: int = 0
    #: The estimate the pending draft came from (verified updates it).
    _drafted_from: Acceptance | None = None

    def propose(
        self, tokens: list[int], pending: list[int], room: int, cost: DecodeCost, num_seqs: int
    ) -> list[int]:
        """The draft to append after the sampled token (`pending`, after the sequence's
        `tokens`): at most `room` tokens, what the generation and the sequence's cells
        still hold after it (empty: none)."""
        room = min(self.max_len, room)
        if room <= 0:
            return []
        self.since_draft += 1
        fixed, per_row = cost.fit()

        def pays(rate: float, length: int) -> int:
            return draft_length(rate, length, fixed_s=fixed, per_row_s=per_row, num_seqs=num_seqs)

        # Now and then one token is tried anyway, if drafts could pay at all here, so a
        # sequence that starts quoting after a while is noticed.
        probe = self.since_draft >= PROBE_EVERY and pays(0.99, 1) > 0
        if not probe and pays(max(a.rate for a in self.acceptance), room) == 0:
            return []  # no draft could pay now, whatever it matched: skip the lookup
        draft, match = self._index(tokens, pending).draft(room)
        if not draft:
            return []
        acceptance = self.acceptance[bisect.bisect_right(MATCH_CLASSES, match)]
        want = pays(acceptance.rate, len(draft))
        if want == 0:
            if not probe:
                return []
            want = 1
        self.since_draft = 0
        self._drafted_from = acceptance
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
        if self._drafted_from is not None:
            self._drafted_from.update(drafted, accepted)
