"""Prompt-lookup (n-gram) speculative decoding: where draft tokens come from, and how
many to try. Pure: no llama.cpp, no clock, no logging.

A generating sequence often repeats what it has seen: an answer quoting its document, a
code edit copying most of the file, JSON repeating its keys. So after each sampled
token the worker looks up the sequence's last n tokens (n = `NGRAM_MAX` down to
`NGRAM_MIN`) in everything the sequence holds (prompt, session history, its own output)
and, at the most recent earlier occurrence, takes the tokens that followed as a draft.
The draft goes into the next decode beside the sampled token, each row with logits; the
worker then samples row by row and keeps drafts while they equal what it sampled (see
`worker.decoder`). Sampling every position as usual and keeping a draft token only when
the draw equals it is the standard speculative rule for a draft that proposes one token
with certainty: the output distribution, greedy or not, is exactly the model's.

`DraftLength` adapts how many tokens to propose per sequence: it grows while whole
drafts are accepted and shrinks when few are, and after a run of poor acceptance it
stops drafting for a while, so open-ended text (where lookups rarely match) does not
pay for rows the model throws away.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

#: Longest and shortest suffix looked up (longer matches are more often right).
NGRAM_MAX = 4
NGRAM_MIN = 2
#: Drafts start at this length and never exceed `max_len` (EngineFlags.spec_draft_max).
START_LEN = 4
#: After this many drafts in a row with under half their tokens accepted, pause...
POOR_RUN = 3
#: ...for this many sampled tokens before drafting again.
COOLDOWN = 32


class NgramIndex:
    """The tokens of one sequence and, for each n-gram, where it last continued.

    `extend` is O(`NGRAM_MAX`) per token; `draft` is O(`NGRAM_MAX`). An n-gram is indexed
    only once a token follows it, so the sequence's own last n tokens never match
    themselves."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        toks, nxt = self.tokens, self._next
        for t in tokens:
            end = len(toks)
            for n in range(NGRAM_MIN, NGRAM_MAX + 1):
                if end >= n:
                    nxt[tuple(toks[end - n : end])] = end
            toks.append(t)

    def draft(self, max_len: int) -> list[int]:
        """Up to `max_len` tokens that followed the longest earlier match of the current
        suffix (most recent occurrence); [] when nothing matches."""
        toks = self.tokens
        if max_len <= 0:
            return []
        for n in range(min(NGRAM_MAX, len(toks)), NGRAM_MIN - 1, -1):
            at = self._next.get(tuple(toks[len(toks) - n :]))
            if at is not None:
                return toks[at : at + max_len]
        return []


@dataclass
class DraftLength:
    """How many tokens the next draft of one sequence may have (adaptive)."""

    max_len: int
    length: int = START_LEN
    #: Drafts in a row that had under half their tokens accepted.
    poor: int = 0
    #: Sampled tokens left before drafting resumes (0: draft).
    paused: int = 0
    num_drafted: int = field(default=0)
    num_accepted: int = field(default=0)

    def __post_init__(self) -> None:
        self.length = min(self.length, self.max_len)

    def next(self) -> int:
        """The draft length to try now (0 while paused)."""
        if self.paused:
            self.paused -= 1
            return 0
        return self.length

    def update(self, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens had its first `accepted` kept."""
        if drafted <= 0:
            return
        self.num_drafted += drafted
        self.num_accepted += accepted
        if accepted == drafted:
            self.length = min(self.max_len, self.length + 2)
            self.poor = 0
        elif 2 * accepted < drafted:
            self.length = max(1, self.length // 2)
            self.poor += 1
            if self.poor >= POOR_RUN:
                self.poor = 0
                self.paused = COOLDOWN
                self.length = START_LEN if self.max_len >= START_LEN else self.max_len
        else:
            self.poor = 0
