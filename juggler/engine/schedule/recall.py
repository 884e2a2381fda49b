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

Each remembered generation says whether it was greedy, and a greedy one carries each
token's tie (`schedule.ties`): where its best logit led by little, the shape of the
decode that chose it. llama.cpp's rounding depends on a decode's shape, so a greedy
answer is given again exactly only where each near-tie is decided by a decode shaped
as the one that decided it before; the draft of a repeat is cut to that
(`ties.exact_length`). Betting 64 rows on an answer given row by row parted at its first
near-tie: bench_spec's story at 1 stream ran 0.79-0.85x as fast as without speculation
the first time it was asked again.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from juggler.engine.schedule.drafts import MAX_MATCH, MIN_MATCH
from juggler.engine.schedule.ties import ANY

#: Tokens remembered (outputs and their context); older generations are forgotten.
RECALL_TOKENS = 32768
#: Remembered occurrences of the last `MIN_MATCH` tokens compared, most recent first.
#: Fewer than a sequence's own index compares: a lookup runs after every sampled token
#: of every speculative generation, and the memory is mostly other texts.
RECALL_CANDIDATES = 32
#: Stands between two remembered generations; never a token id.
_SEP = -1


class Recalled(NamedTuple):
    """A lookup's draft, how far back its match reaches, whether the generation it comes
    from was drawn greedily, and the ties of the draft's tokens and of the one after it
    (see the module doc)."""

    draft: list[int]
    reach: int
    greedy: bool = False
    ties: Sequence[int] = ()


NOTHING = Recalled([], 0)


class Recall:
    def __init__(self, max_tokens: int = RECALL_TOKENS) -> None:
        self.max_tokens = max_tokens
        #: The remembered generations: tokens, whether greedy, each token's tie.
        self._docs: deque[tuple[list[int], bool, list[int]]] = deque()
        #: The same, to remember an answer given again (with the same ties) only once.
        self._seen: set[tuple[bool, tuple[int, ...], tuple[int, ...]]] = set()
        #: Where each indexed generation starts in `tokens`, and whether it was greedy.
        self._starts: list[int] = []
        self._greedy: list[bool] = []
        self._size = 0
        self.tokens: list[int] = []
        #: Each token's tie (`ANY` for context tokens and separators).
        self.ties: list[int] = []
        self._at: dict[tuple[int, ...], list[int]] = {}

    def __len__(self) -> int:
        return self._size

    def add(
        self,
        context: Sequence[int],
        output: Sequence[int],
        greedy: bool = False,
        ties: Sequence[int] = (),
    ) -> None:
        """Remember `output`, which followed `context` (only its last `MAX_MATCH` tokens
        are kept), was drawn greedily or not, with the ties of its last `len(ties)`
        tokens (the others: `ANY`); the oldest generations are forgotten past
        `max_tokens`."""
        if not output:
            return
        context = context[-MAX_MATCH:]
        doc = [*context, *output][-self.max_tokens :]
        ties = [*([ANY] * (len(context) + len(output) - len(ties))), *ties][-len(doc) :]
        key = (greedy, tuple(doc), tuple(ties))
        if key in self._seen:
            return
        self._seen.add(key)
        self._docs.append((doc, greedy, ties))
        self._size += len(doc)
        if self._size > self.max_tokens:
            while self._size > self.max_tokens // 2 and len(self._docs) > 1:
                old, was_greedy, old_ties = self._docs.popleft()
                self._size -= len(old)
                self._seen.discard((was_greedy, tuple(old), tuple(old_ties)))
            self._rebuild()
        else:
            self._index(doc, greedy, ties)

    def _rebuild(self) -> None:
        self.tokens, self.ties, self._at, self._starts, self._greedy = [], [], {}, [], []
        for doc, greedy, ties in self._docs:
            self._index(doc, greedy, ties)

    def _index(self, doc: list[int], greedy: bool, ties: list[int]) -> None:
        toks, at = self.tokens, self._at
        toks.append(_SEP)
        self.ties.append(ANY)
        self.ties.extend(ties)
        self._starts.append(len(toks))
        self._greedy.append(greedy)
        for t in doc:
            end = len(toks)
            if end >= MIN_MATCH:
                key = tuple(toks[end - MIN_MATCH : end])
                if _SEP not in key:
                    at.setdefault(key, []).append(end)
            toks.append(t)

    def lookup(self, tail: Sequence[int], max_len: int) -> Recalled:
        """What followed the remembered occurrence of `tail`'s last tokens that matches
        furthest back (ties: the most recent), up to `max_len` tokens and never past the
        end of its generation, how far it matches (at most `MAX_MATCH`), whether that
        generation was greedy, and the ties of the draft and of the token after it;
        nothing if the last `MIN_MATCH` tokens of `tail` were never seen."""
        n = len(tail)
        if max_len <= 0 or n < MIN_MATCH:
            return NOTHING
        found = self._at.get(tuple(tail[n - MIN_MATCH :]))
        if not found:
            return NOTHING
        toks = self.tokens
        best_at, best_len = found[-1], 0
        for at in reversed(found[-RECALL_CANDIDATES:]):
            limit = min(MAX_MATCH, n, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == tail[n - k - 1]:
                k += 1
            if k > best_len:
                best_at, best_len = at, k
                if k >= MAX_MATCH:
                    break  # none further back can match further
        draft = toks[best_at : best_at + max_len]
        if _SEP in draft:
            draft = draft[: draft.index(_SEP)]
        if not draft:
            return NOTHING
        greedy = self._greedy[bisect.bisect_right(self._starts, best_at) - 1]
        ties = self.ties[best_at : best_at + len(draft) + 1] if greedy else ()
        return Recalled(draft, best_len, greedy, ties)
