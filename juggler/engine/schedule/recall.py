"""A worker's memory of the text its recent generations produced, a second source of
speculative drafts beside each sequence's own tokens (`drafts.NgramIndex`). Pure.

Requests repeat across sequences: a client retries or regenerates, an agent asks the
same tool question each turn, several users ask for the same record, a benchmark
sends one prompt each round. A sequence's own index cannot see any of that: its
tokens are its prompt and its own output. So each finished generation's output, with the
`MAX_MATCH` tokens before it as context, is kept here: of the most recent, at most
`RECALL_TOKENS` tokens and at least half as many (`Recall`). A draft looks up the
sequence's last tokens in both; the match that reaches further back wins
(`speculation.Speculation.propose`), so a repeated answer is drafted from its earlier
copy, while a sequence quoting its own document keeps drafting from the document.
llama.cpp's `ngram-mod` keeps one hash table of n-grams across all requests of a server
for the same reason.

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
from collections import Counter
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


class _Index:
    """One generation of the memory: the generations remembered in it, one after another
    in `tokens` (each after a separator), each token's tie, and where each `MIN_MATCH`
    tokens end."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        #: Each token's tie (`ANY` for context tokens and separators).
        self.ties: list[int] = []
        self.at: dict[tuple[int, ...], list[int]] = {}
        #: Where each generation starts in `tokens`, and the generation.
        self.starts: list[int] = []
        self.docs: list[_Doc] = []
        #: Tokens of the generations held (separators not counted).
        self.size = 0

    def add(self, entry: _Doc) -> None:
        toks, at = self.tokens, self.at
        toks.append(_SEP)
        self.ties.append(ANY)
        self.ties.extend(entry.ties)
        self.starts.append(len(toks))
        self.docs.append(entry)
        self.size += len(entry.tokens)
        for t in entry.tokens:
            end = len(toks)
            if end >= MIN_MATCH:
                key = tuple(toks[end - MIN_MATCH : end])
                if _SEP not in key:
                    at.setdefault(key, []).append(end)
            toks.append(t)

    def doc_at(self, at: int) -> _Doc:
        """The remembered generation that `tokens[at]` belongs to."""
        return self.docs[bisect.bisect_right(self.starts, at) - 1]


class Recall:
    """The memory, in two generations of indexes (issue 47): what is remembered goes into
    the newer; once it holds half of `max_tokens`, the older is forgotten whole and the
    newer becomes the older. Forgetting the oldest answers one by one and indexing the
    rest again took tens of milliseconds of the worker's time, holding Python's lock,
    every few hundred requests."""

    def __init__(self, max_tokens: int = RECALL_TOKENS) -> None:
        self.max_tokens = max_tokens
        #: The remembered generations by what they hold, to remember an answer given
        #: again (with the same ties) only once.
        self._seen: dict[tuple[bool, tuple[int, ...], tuple[int, ...]], _Doc] = {}
        #: How many remembered greedy generations hold each context and output.
        self._greedy_texts: Counter[tuple[int, ...]] = Counter()
        self._new = _Index()
        self._old = _Index()

    def __len__(self) -> int:
        return self._new.size + self._old.size

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
        if self._new.size and self._new.size + len(doc) > self.max_tokens // 2:
            self._forget_old()
            self._old, self._new = self._new, _Index()
        self._new.add(entry)
        if len(self) > self.max_tokens:  # a generation of one answer, longer than half
            self._forget_old()

    def _forget_old(self) -> None:
        for old in self._old.docs:
            old_text = tuple(old.tokens)
            del self._seen[(old.greedy, old_text, tuple(old.ties))]
            if old.greedy:
                self._greedy_texts[old_text] -= 1
        self._old = _Index()

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
        key = tuple(tail[n - MIN_MATCH :])
        # The most recent occurrences first: the newer generation's, then the older's.
        seen: list[tuple[_Index, int]] = []
        for index in (self._new, self._old):
            found = index.at.get(key)
            room = RECALL_CANDIDATES - len(seen)
            if found and room > 0:
                seen.extend((index, at) for at in reversed(found[-room:]))
        if not seen:
            return NOTHING
        (best, best_at), best_len, best_sure = seen[0], 0, False
        for index, at in seen:
            if best_len >= MAX_MATCH and (best_sure or not index.doc_at(at).confirmed):
                if best_sure:
                    break  # none further back can match further
                continue  # only a confirmed one could be preferred now
            toks = index.tokens
            limit = min(MAX_MATCH, n, at)
            k = MIN_MATCH
            while k < limit and toks[at - k - 1] == tail[n - k - 1]:
                k += 1
            if k > best_len:
                best, best_at, best_len = index, at, k
                best_sure = index.doc_at(at).confirmed
            elif k == best_len and not best_sure and index.doc_at(at).confirmed:
                best, best_at, best_sure = index, at, True  # an answer given twice the same
        draft = best.tokens[best_at : best_at + max_len]
        if _SEP in draft:
            draft = draft[: draft.index(_SEP)]
        if not draft:
            return NOTHING
        entry = best.doc_at(best_at)
        if not entry.greedy:
            return Recalled(draft, best_len)
        ties = best.ties[best_at : best_at + len(draft) + 1]
        return Recalled(draft, best_len, True, ties, entry.confirmed)
