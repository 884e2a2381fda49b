"""One generation's speculative decoding state, on its worker thread (the lookup, the
acceptance estimate and the cost model are `schedule.drafts`).

`Speculation.propose(s, ...)` runs after a token was sampled for `s` (its only pending
token): it brings the n-gram index up to what the sequence holds, looks up a draft,
decides how much of it pays now (`drafts.draft_length`, from how often this sequence's
drafts from matches that long were kept and what a decode costs on this worker) and
appends that to `s.pending`
(`s.num_draft` says how many of the pending tokens are draft). The decoder decodes the
sampled token and the drafts in one chunk, samples each row in order, and reports how
many drafts the samples kept (`verified`).
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
from juggler.engine.worker.session import Generation, Session


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
        self, s: Session, g: Generation, n_ctx: int, cost: DecodeCost, num_seqs: int
    ) -> int:
        """Append a draft after `s`'s sampled token; returns its length (0: none)."""
        # Room: what the generation may still produce after the pending token (a fully
        # accepted draft also yields one more sampled token), and the sequence's cells.
        room = min(
            self.max_len,
            g.max_new_tokens - g.num_generated - 1,
            n_ctx - (s.n_past + len(s.pending)) - 1,
        )
        if room <= 0:
            return 0
        self.since_draft += 1
        fixed, per_row = cost.fit()

        def pays(rate: float, length: int) -> int:
            return draft_length(rate, length, fixed_s=fixed, per_row_s=per_row, num_seqs=num_seqs)

        # Now and then one token is tried anyway, if drafts could pay at all here, so a
        # sequence that starts quoting after a while is noticed.
        probe = self.since_draft >= PROBE_EVERY and pays(0.99, 1) > 0
        if not probe and pays(max(a.rate for a in self.acceptance), room) == 0:
            return 0  # no draft could pay now, whatever it matched: skip the lookup
        draft, match = self._index(s).draft(room)
        if not draft:
            return 0
        acceptance = self.acceptance[bisect.bisect_right(MATCH_CLASSES, match)]
        want = pays(acceptance.rate, len(draft))
        if want == 0:
            if not probe:
                return 0
            want = 1
        draft = draft[:want]
        self.since_draft = 0
        self._drafted_from = acceptance
        s.pending.extend(draft)
        s.num_draft = len(draft)
        return len(draft)

    def _index(self, s: Session) -> NgramIndex:
        """The index, brought up to the sequence's tokens and its sampled token."""
        if self.index is None:
            self.index = NgramIndex(s.tokens)
        n, n_tokens = len(self.index), len(s.tokens)
        if n < n_tokens:
            self.index.extend(s.tokens[n:])
            n = n_tokens
        self.index.extend(s.pending[n - n_tokens :])
        return self.index

    def verified(self, drafted: int, accepted: int) -> None:
        if self._drafted_from is not None:
            self._drafted_from.update(drafted, accepted)
