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

A greedy answer remembered twice, the same after the same context, is *confirmed*: it
came out the same when it was asked again, and its next repeats are drafted further
(`draft_length.CONFIRMED_CAP`); among matches that reach equally far back, a confirmed one is
drafted.

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
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
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
    #: The generation's output was given before, exactly, after the same context: a
    #: greedy answer asked again that came out the same (see `Recall.add`).
    confirmed: bool = False


NOTHING = Recalled([], 0)


@dataclass(eq=False)
class _Doc:
    """One remembered generation: its context and output, whether it was greedy, each
    token's tie, and whether it is confirmed (see `Recall.add`)."""

    tokens: list[int]
    greedy: bool
    ties: list[int]
    confirmed: bool = False


class Recall:
    def __init__(self, max_tokens: int = RECALL_TOKENS) -> None:
        self.max_tokens = max_tokens
        #: The remembered generations, oldest first.
        self._docs: deque[_Doc] = deque()
        #: The same by what they hold, to remember an answer given again (with the same
        #: ties) only once.
        self._seen: dict[tuple[bool, tuple[int, ...], tuple[int, ...]], _Doc] = {}
        #: How many remembered greedy generations hold each context and output.
        self._greedy_texts: Counter[tuple[int, ...]] = Counter()
        #: Where each indexed generation starts in `tokens`, and the generation.
        self._starts: list[int] = []
        self._indexed: list[_Doc] = []
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
        `max_tokens`. A greedy output that a remembered greedy generation gave before,
        exactly, after the same context is *confirmed*: asked again, it came out the
        same, so its next repeat is drafted further (`draft_length.CONFIRMED_CAP`)."""
        if not output:
            return
        context = context[-MAX_MATCH:]
        doc = [*context, *output][-self.max_tokens :]
        text = tuple(doc)
        confirmed = greedy and self._greedy_texts[text] > 0
        ties = [*([ANY] * (len(context) + len(output) - len(ties))), *ties][-len(doc) :]
        key = (greedy, text, tuple(ties))
        known = self._seen.get(key)
        if known is not None:
            known.confirmed = known.confirmed or confirmed
            return
        entry = _Doc(doc, greedy, ties, confirmed)
        self._seen[key] = entry
        if greedy:
            self._greedy_texts[text] += 1
        self._docs.append(entry)
        self._size += len(doc)
        if self._size > self.max_tokens:
            while self._size > self.max_tokens // 2 and len(self._docs) > 1:
                old = self._docs.popleft()
                self._size -= len(old.tokens)
                old_text = tuple(old.tokens)
                del self._seen[(old.greedy, old_text, tuple(old.ties))]
                if old.greedy:
                    self._greedy_texts[old_text] -= 1
            self._rebuild()
        else:
            self._index(entry)

    def _rebuild(self) -> None:
        self.tokens, self.ties, self._at, self._starts, self._indexed = [], [], {}, [], []
        for entry in self._docs:
            self._index(entry)

    def _index(self, entry: _Doc) -> None:
        toks, at = self.tokens, self._at
        toks.append(_SEP)
        self.ties.append(ANY)
        self.ties.extend(entry.ties)
        self._starts.append(len(toks))
        self._indexed.append(entry)
        for t in entry.tokens:
            end = len(toks)
            if end >= MIN_MATCH:
                key = tuple(toks[end - MIN_MATCH : end])
                if _SEP not in key:
                    at.setdefault(key, []).append(end)
            toks.append(t)

    def lookup(self, tail: Sequence[int], max_len: int) -> Recalled:
        """What followed the remembered occurrence of `tail`'s last tokens that matches
        furthest back (ties: a confirmed one, then the most recent), up to `max_len`
        tokens and never past the end of its generation, how far it matches (at most
        `MAX_MATCH`), whether that generation was greedy and is confirmed, and the ties
        of the draft and of the token after it; nothing if the last `MIN_MATCH` tokens
        of `tail` were never seen."""
        n = len(tail)
        if max_len <= 0 or n < MIN_MATCH:
            return NOTHING
        found = self._at.get(tuple(tail[n - MIN_MATCH :]))
        if not found:
            return NOTHING
        toks = self.tokens
        best_at, best_len, best_sure = found[-1], 0, False
        for at in reversed(found[-RECALL_CANDIDATES:]):
            if best_len >= MAX_MATCH and (best_sure or not self._doc_at(at).confirmed):
                if best_sure:
                    break  # none further back can match further
                continue  # only a confirmed one could be preferred now
            limit = min(MAX_MATCH, n, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == tail[n - k - 1]:
                k += 1
            if k > best_len:
                best_at, best_len = at, k
                best_sure = self._doc_at(at).confirmed
            elif k == best_len and not best_sure and self._doc_at(at).confirmed:
                best_at, best_sure = at, True  # an answer that came out twice the same
        draft = toks[best_at : best_at + max_len]
        if _SEP in draft:
            draft = draft[: draft.index(_SEP)]
        if not draft:
            return NOTHING
        entry = self._doc_at(best_at)
        if not entry.greedy:
            return Recalled(draft, best_len)
        ties = self.ties[best_at : best_at + len(draft) + 1]
        return Recalled(draft, best_len, True, ties, entry.confirmed)

    def _doc_at(self, at: int) -> _Doc:
        """The remembered generation that `tokens[at]` belongs to."""
        return self._indexed[bisect.bisect_right(self._starts, at) - 1]
