"""Prompt-lookup (n-gram) speculative decoding: where draft tokens come from. Pure: no
llama.cpp, no clock, no logging.

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

The rest of speculation lives beside this module, one idea each: `schedule.recall`
(drafts from the worker's earlier generations), `schedule.decode_cost` (what a decode of
so many rows costs), `schedule.survival` (how far drafts are kept), `schedule.ties`
(where a repeat may part) and `schedule.draft_length` (how long a draft pays, from the
last two).
"""

from __future__ import annotations

from collections.abc import Iterable

from juggler.engine.cache.prefix_cache import common_prefix_len

#: A draft needs the last `MIN_MATCH` tokens to have occurred before.
MIN_MATCH = 3
#: Matches are compared backwards up to this many tokens; longer ones count as equal.
MAX_MATCH = 64
#: Earlier occurrences of the last `MIN_MATCH` tokens compared, most recent first.
MAX_CANDIDATES = 256

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
