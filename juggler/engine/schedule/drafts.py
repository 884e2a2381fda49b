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

How long a draft pays (`draft_length`) depends on the hardware: every draft row costs
compute, and only the decode's fixed cost is saved per accepted token. `DecodeCost`
learns the decode time as `fixed + per_row * rows` from the decodes the worker runs
(measured here on 2 CPU cores with SmolLM2: about 6 ms + 5.5 ms a row, so a lone stream
gains from long, well-accepted drafts and 8 batched streams gain little); `Acceptance`
estimates how likely each draft token of one sequence is to be kept. A draft is only
proposed when its expected saving is positive, so open-ended text, where drafts are
rarely right, does not pay for rows the model throws away.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from juggler.engine.cache.prefix_cache import common_prefix_len

#: A draft needs the last `MIN_MATCH` tokens to have occurred before.
MIN_MATCH = 3
#: Matches are compared backwards up to this many tokens; longer ones count as equal.
MAX_MATCH = 64
#: Earlier occurrences of the last `MIN_MATCH` tokens compared, most recent first.
MAX_CANDIDATES = 256
#: Matches are told apart by length for the acceptance estimate: shorter than the first
#: bound, shorter than the second, and the rest (a long match is more often right).
MATCH_CLASSES = (6, 16)
#: A draft token is kept with this probability until a sequence has shown its own.
PRIOR_ACCEPT = 0.75
#: Weight of the prior, in draft tokens.
PRIOR_WEIGHT = 4.0
#: Older observations fade by this factor per verified draft.
DECAY = 0.9
#: While drafts do not pay, a one-token draft is still tried this often (sampled tokens),
#: so that a sequence that starts to quote is noticed.
PROBE_EVERY = 16


class NgramIndex:
    """The tokens of one sequence and, for each `MIN_MATCH` tokens, every place they
    occurred with a token after them.

    A draft continues the earlier occurrence of the current suffix that matches it
    furthest back (ties: the most recent). Grounded text repeats itself in templated
    ways: twelve paragraphs that each say "was built in the year", a file whose methods
    all end in "return out". The most recent "in the year" is usually the wrong
    paragraph; the one whose match reaches back to "The harbor of Varenholm" is the one
    being quoted. Where two occurrences match equally far back and then go different
    ways, only what they agree on is drafted. `extend` is O(1) per token; `draft`
    compares at most `MAX_CANDIDATES` occurrences back to `MAX_MATCH` tokens each, and in
    practice stops within a few tokens for all but the right one. The last tokens never
    match themselves."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._at: dict[tuple[int, ...], list[int]] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        toks, at = self.tokens, self._at
        for t in tokens:
            end = len(toks)
            if end >= MIN_MATCH:
                at.setdefault(tuple(toks[end - MIN_MATCH : end]), []).append(end)
            toks.append(t)

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
        best_at, best_len, agreed = found[-1], 0, max_len
        for at in reversed(found[-MAX_CANDIDATES:]):
            # toks[at - k] against toks[n - k] for k = MIN_MATCH + 1, ...
            limit = min(MAX_MATCH, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == toks[n - k - 1]:
                k += 1
            if k > best_len:
                best_at, best_len, agreed = at, k, max_len
            elif k == best_len:
                # Two places match equally far back: draft only what both continue with.
                agreed = common_prefix_len(toks[at : at + agreed], toks[best_at : best_at + agreed])
        if agreed == 0:
            return [], 0
        return toks[best_at : best_at + agreed], best_len


@dataclass
class Acceptance:
    """How likely one sequence's next draft token is to be kept (a decaying count)."""

    kept: float = PRIOR_ACCEPT * PRIOR_WEIGHT
    seen: float = PRIOR_WEIGHT

    @property
    def rate(self) -> float:
        return self.kept / self.seen

    def update(self, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens had its first `accepted` kept: that many tokens were
        kept and, unless all were, one was refused (those after it say nothing)."""
        if drafted <= 0:
            return
        seen = accepted + (1 if accepted < drafted else 0)
        self.kept = self.kept * DECAY + accepted
        self.seen = self.seen * DECAY + seen


def expected_tokens(p: float, k: int) -> float:
    """Tokens a decode yields with a k-token draft kept token by token with chance p."""
    if p >= 1.0:
        return float(k + 1)
    return (1.0 - p ** (k + 1)) / (1.0 - p)


def draft_length(p: float, max_len: int, *, fixed_s: float, per_row_s: float, num_seqs: int) -> int:
    """The draft length with the largest expected saving for one of `num_seqs` sequences
    decoded together, or 0 when no length saves time.

    A draft of k rows adds `k * per_row_s` to the decode and yields E(k) - 1 extra
    tokens, each of which would otherwise take its own later decode slot: this
    sequence's share of the fixed cost plus its row."""
    if max_len <= 0 or per_row_s <= 0.0:
        return 0
    slot = fixed_s / max(1, num_seqs) + per_row_s
    best, best_gain = 0, 0.0
    for k in range(1, max_len + 1):
        gain = (expected_tokens(p, k) - 1.0) * slot - k * per_row_s
        if gain > best_gain:
            best, best_gain = k, gain
    return best


class DecodeCost:
    """A running least-squares fit of decode time = fixed + per_row * rows, with old
    decodes fading (`weight` per decode), from (rows, seconds) the worker measures."""

    def __init__(self, fixed_s: float = 0.006, per_row_s: float = 0.0055) -> None:
        # Seeded with two made-up decodes that say the defaults, worth a few real ones.
        self._n = self._x = self._y = self._xx = self._xy = 0.0
        for rows, w in ((1, 2.0), (9, 2.0)):
            self._add(rows, fixed_s + per_row_s * rows, w)

    def _add(self, rows: float, seconds: float, w: float) -> None:
        self._n += w
        self._x += w * rows
        self._y += w * seconds
        self._xx += w * rows * rows
        self._xy += w * rows * seconds

    def update(self, rows: int, seconds: float, keep: float = 0.98) -> None:
        for attr in ("_n", "_x", "_y", "_xx", "_xy"):
            setattr(self, attr, getattr(self, attr) * keep)
        self._add(rows, seconds, 1.0)

    def fit(self) -> tuple[float, float]:
        """(fixed_s, per_row_s), both at least 0."""
        var = self._xx - self._x * self._x / self._n
        if var <= 1e-9:
            return max(0.0, self._y / self._n), 0.0
        per_row = (self._xy - self._x * self._y / self._n) / var
        per_row = max(0.0, per_row)
        fixed = max(0.0, (self._y - per_row * self._x) / self._n)
        return fixed, per_row
