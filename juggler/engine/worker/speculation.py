"""One generation's speculative decoding state, on its worker thread (the lookup, the
acceptance estimate and the cost model are `schedule.drafts`).

`Speculation.propose(s, ...)` runs after a token was sampled for `s` (its only pending
token): it decides how long a draft pays now (`drafts.draft_length`, from this
sequence's acceptance and what a decode costs on this worker), brings the n-gram index
up to what the sequence holds, looks up a draft and appends it to `s.pending`
(`s.num_draft` says how many of the pending tokens are draft). The decoder decodes the
sampled token and the drafts in one chunk, samples each row in order, and reports how
many drafts the samples kept (`verified`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from juggler.engine.schedule.drafts import (
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
    acceptance: Acceptance = field(default_factory=Acceptance)
    #: Built on the first draft (prompt and history), then extended token by token.
    index: NgramIndex | None = None
    #: Sampled tokens since a draft was last tried.
    since_draft: int = 0

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
        want = draft_length(
            self.acceptance.rate, room, fixed_s=fixed, per_row_s=per_row, num_seqs=num_seqs
        )
        if want == 0:
            # Now and then try one token anyway, if drafts could pay at all here, so a
            # sequence that starts quoting after a while is noticed.
            could = draft_length(0.99, 1, fixed_s=fixed, per_row_s=per_row, num_seqs=num_seqs)
            if not could or self.since_draft < PROBE_EVERY:
                return 0
            want = 1
        draft, _ = self._index(s).draft(want)
        if draft:
            self.since_draft = 0
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
        self.acceptance.update(drafted, accepted)
