"""A worker's memory of the text its recent generations produced, a second source of
speculative drafts beside each sequence's own tokens (`drafts.NgramIndex`). Pure.

Requests repeat across sequences: a client retries or regenerates, an agent asks the
same tool question each turn, several users ask for the same record, a benchmark
sends one prompt each round. A sequence's own index cannot see any of that: its
tokens are its prompt and its own output. So each finished generation's output, with
the `MAX_MATCH` tokens before it as context, is kept here, the most recent
`RECALL_TOKENS` tokens of them. A draft looks up the sequence's last tokens in both;
the match that reaches further back wins (`speculation.Speculation.propose`), so a
repeated answer is drafted from its earlier copy, while a sequence quoting its own
document keeps drafting from the document. llama.cpp's `ngram-mod` keeps one hash
table of n-grams across all requests of a server for the same reason.

Lookups never run across the end of one remembered generation into the next: each is
stored after a separator that no token equals.

Each remembered generation says whether it was greedy and whether it was *lone*: drafted
with speculation while no other sequence shared its decodes. llama.cpp's rounding
depends on a decode's rows, so a greedy answer is given again exactly only when asked
again in decodes shaped as it was; a lone stream bets a repeated answer whole only on a
lone one, and prefers a lone one where two match as far back (an answer given beside
seven other streams, or without drafts, parts from a lone re-run at its first near-tie:
bench_spec's story at 1 stream recalled the 8-stream answer to the same prompt, bet 64
rows on it and ran 0.84x as fast as without speculation).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from juggler.engine.schedule.drafts import MAX_MATCH, MIN_MATCH

#: Tokens remembered (outputs and their context); older generations are forgotten.
RECALL_TOKENS = 32768
#: Remembered occurrences of the last `MIN_MATCH` tokens compared, most recent first.
#: Fewer than a sequence's own index compares: a lookup runs after every sampled token
#: of every speculative generation, and the memory is mostly other texts.
RECALL_CANDIDATES = 32
#: Stands between two remembered generations; never a token id.
_SEP = -1


class Recalled(NamedTuple):
    """A lookup's draft, how far back its match reaches, and whether the generation it
    comes from was drawn greedily and was lone (see the module doc)."""

    draft: list[int]
    reach: int
    greedy: bool = False
    lone: bool = False


NOTHING = Recalled([], 0)


class Recall:
    def __init__(self, max_tokens: int = RECALL_TOKENS) -> None:
        self.max_tokens = max_tokens
        #: The remembered generations, each with whether it was greedy and lone.
        self._docs: deque[tuple[list[int], bool, bool]] = deque()
        #: The same, to remember an answer given again only once.
        self._seen: set[tuple[bool, bool, tuple[int, ...]]] = set()
        #: Where each indexed generation starts in `tokens`, and whether it was greedy,
        #: and lone.
        self._starts: list[int] = []
        self._greedy: list[bool] = []
        self._lone: list[bool] = []
        self._size = 0
        self.tokens: list[int] = []
        self._at: dict[tuple[int, ...], list[int]] = {}

    def __len__(self) -> int:
        return self._size

    def add(
        self,
        context: Sequence[int],
        output: Sequence[int],
        greedy: bool = False,
        lone: bool = False,
    ) -> None:
        """Remember `output`, which followed `context` (only its last `MAX_MATCH` tokens
        are kept), was drawn greedily or not, and was lone or not (see the module doc);
        the oldest generations are forgotten past `max_tokens`."""
        if not output:
            return
        doc = [*context[-MAX_MATCH:], *output][-self.max_tokens :]
        key = (greedy, lone, tuple(doc))
        if key in self._seen:
            return
        self._seen.add(key)
        self._docs.append((doc, greedy, lone))
        self._size += len(doc)
        if self._size > self.max_tokens:
            while self._size > self.max_tokens // 2 and len(self._docs) > 1:
                old, was_greedy, was_lone = self._docs.popleft()
                self._size -= len(old)
                self._seen.discard((was_greedy, was_lone, tuple(old)))
            self._rebuild()
        else:
            self._index(doc, greedy, lone)

    def _rebuild(self) -> None:
        self.tokens, self._at, self._starts, self._greedy, self._lone = [], {}, [], [], []
        for doc, greedy, lone in self._docs:
            self._index(doc, greedy, lone)

    def _index(self, doc: list[int], greedy: bool, lone: bool) -> None:
        toks, at = self.tokens, self._at
        toks.append(_SEP)
        self._starts.append(len(toks))
        self._greedy.append(greedy)
        self._lone.append(lone)
        for t in doc:
            end = len(toks)
            if end >= MIN_MATCH:
                key = tuple(toks[end - MIN_MATCH : end])
                if _SEP not in key:
                    at.setdefault(key, []).append(end)
            toks.append(t)

    def lookup(self, tail: Sequence[int], max_len: int, prefer_lone: bool = False) -> Recalled:
        """What followed the remembered occurrence of `tail`'s last tokens that matches
        furthest back (ties: a greedy lone one if `prefer_lone`, then the most recent), up
        to `max_len` tokens and never past the end of its generation, how far it matches
        (at most `MAX_MATCH`) and whether that generation was greedy and lone; nothing if
        the last `MIN_MATCH` tokens of `tail` were never seen."""
        n = len(tail)
        if max_len <= 0 or n < MIN_MATCH:
            return NOTHING
        found = self._at.get(tuple(tail[n - MIN_MATCH :]))
        if not found:
            return NOTHING
        toks = self.tokens
        best_at, best_len, best_lone = found[-1], 0, False
        for at in reversed(found[-RECALL_CANDIDATES:]):
            limit = min(MAX_MATCH, n, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == tail[n - k - 1]:
                k += 1
            if k < best_len or (k == best_len and (best_lone or not prefer_lone)):
                continue
            lone = prefer_lone and self._is_lone_greedy(at)
            if k > best_len or lone:
                best_at, best_len, best_lone = at, k, lone
            if k >= MAX_MATCH and (best_lone or not prefer_lone):
                break  # none further back can match further (or be preferred)
        draft = toks[best_at : best_at + max_len]
        if _SEP in draft:
            draft = draft[: draft.index(_SEP)]
        if not draft:
            return NOTHING
        doc = self._doc(best_at)
        return Recalled(draft, best_len, self._greedy[doc], self._lone[doc])

    def _doc(self, at: int) -> int:
        """The index of the remembered generation that position `at` of `tokens` is in."""
        return bisect.bisect_right(self._starts, at) - 1

    def _is_lone_greedy(self, at: int) -> bool:
        doc = self._doc(at)
        return self._greedy[doc] and self._lone[doc]
