"""One generation's speculative decoding state, on its worker thread (the policy and the
n-gram lookup are `schedule.drafts`).

`Speculation.propose(s)` runs after a token was sampled for `s` (its only pending
token): it brings the n-gram index up to what the sequence holds, looks up a draft and
appends it to `s.pending` (`s.num_draft` says how many of the pending tokens are draft).
The decoder decodes the sampled token and the drafts in one chunk, samples each row in
order, and calls `verified(drafted, accepted)` with how many drafts the samples kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from juggler.engine.schedule.drafts import DraftLength, NgramIndex
from juggler.engine.worker.session import Generation, Session


@dataclass(eq=False)
class Speculation:
    draft_len: DraftLength
    #: Built on the first proposal (prompt and history), then extended token by token.
    index: NgramIndex | None = field(default=None)

    def propose(self, s: Session, g: Generation, n_ctx: int) -> int:
        """Append a draft after `s`'s sampled token; returns its length (0: none)."""
        want = self.draft_len.next()
        # Room: what the generation may still produce after the pending token (a fully
        # accepted draft also yields one more sampled token), and the sequence's cells.
        room = min(
            want,
            g.max_new_tokens - g.num_generated - 1,
            n_ctx - (s.n_past + len(s.pending)) - 1,
        )
        if room <= 0:
            return 0
        if self.index is None:
            self.index = NgramIndex(s.tokens)
        n, n_tokens = len(self.index), len(s.tokens)
        if n < n_tokens:
            self.index.extend(s.tokens[n:])
            n = n_tokens
        self.index.extend(s.pending[n - n_tokens :])  # the sampled token(s)
        draft = self.index.draft(room)
        s.pending.extend(draft)
        s.num_draft = len(draft)
        return len(draft)

    def verified(self, drafted: int, accepted: int) -> None:
        self.draft_len.update(drafted, accepted)
