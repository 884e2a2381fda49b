"""Pure batch assembly for one worker tick: which tokens of which sequences go in.

`schedule()` reads a description of every sequence's outstanding work and returns a
`BatchPlan`; it does no I/O, reads no clock and touches no llama.cpp state, so the tests
drive it directly. The worker's `Decoder` carries the plan out: it fills the batch chunk
by chunk, remembers which session owns each logit row, decodes, and samples each row
with its owner's sampler.

Policy:
1. Every generating sequence whose next token is its only pending token gets one decode
   row (with logits). When the batch cannot hold them all, the rotation `start` decides
   who waits, so over successive ticks everyone advances (round-robin fairness). A
   sequence with speculative draft tokens after that token (`num_draft`) gets a row for
   each, all with logits, as far as the batch has room once every decoder has its row.
2. Leftover room goes to prefill chunks, each at most `max_prefill_chunk` tokens, and in
   total at most `max_prefill_chunk` while any sequence is decoding, so a long prompt never
   starves the decoders. Sequences with a generation waiting come before input that was
   only appended. A sequence without a generation keeps its last pending token back: its
   logits are only needed once a generation is registered. A generating prompt may end
   in drafts (a prompt asked again, drafted from its remembered answer): each of them
   that the chunk holds gets logits too, as the last prompt token does.
3. Nothing is planned beyond `free_cells` (KV cells left); work that could not be placed
   is listed in `deferred`.
4. Where more than one sequence chooses tokens in the plan, the rows that choose stay
   under `TILE_ROWS` as long as trimming drafts can keep them there (`_fit_few`; the
   longest drafts are cut first). A draft is proposed before the tick that decodes it
   admits new requests: a lone stream that drafted 62 tokens of its remembered answer
   was joined by seven repeats' last prompt rows, a 77-row tiled decode that chose
   its draft and every newcomer's first token otherwise than the few-row decodes that
   chose them before, and each of the eight answers parted from its remembered copy
   (`bench_spec.py --levels 8 --workloads story`: seven or eight new answers in each
   of six bursts with drafts; kept under 64, none after the first). A lone stream's
   own tiled decode stays as it planned it.

A plan of 64 rows or more is decoded in two (`exact_decodes`): first the prompt rows that
choose nothing, then the rows that choose a token (a generating sequence's token and
drafts, and the last `FINAL_ROWS` rows of a prompt), so those are decoded by few rows,
whose arithmetic is the same whatever else the decode holds (`schedule.ties`). A prompt
asked again decodes its last rows so, in a decode of its own or beside other streams'
tokens; had the first answer to it been chosen by the tiled decode that prefilled eight
prompts at once, its rounding would differ, and every later token with it: measured
(`bench/bench_ties.py --prompt-tail`), such a repeat moved leads by up to 0.94 and
came out otherwise in each of 4 stories, and was bit for bit the same once the prompt's
last rows were decoded by few rows the first time too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from juggler.engine.schedule.ties import TILE_ROWS

#: The rows at the end of a prompt decoded with the rows that choose tokens (see the
#: module doc): two, so that a lone sequence's are two rows, as exact as a few-row
#: decode (a single row over more than 256 cells is not, `schedule.ties`).
FINAL_ROWS = 2


@dataclass(frozen=True)
class SeqWork:
    """One sequence's outstanding work as the scheduler sees it: `num_pending` tokens, of
    which the last `num_draft` are speculative drafts (generating sequences only)."""

    key: int
    num_pending: int
    is_generating: bool
    num_draft: int = 0


@dataclass(frozen=True)
class Chunk:
    """`num_tokens` pending tokens of sequence `key`; if `wants_logits`, logits for its
    last `num_logits` rows (the sampled token and the drafts after it)."""

    key: int
    num_tokens: int
    wants_logits: bool
    num_logits: int = 1


@dataclass(frozen=True)
class BatchPlan:
    chunks: tuple[Chunk, ...]
    deferred: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


def _rotated(work: Sequence[SeqWork], start: int) -> list[SeqWork]:
    if not work:
        return []
    k = start % len(work)
    return [*work[k:], *work[:k]]


def schedulable(w: SeqWork) -> int:
    """How many of its pending tokens a sequence may decode now."""
    if w.is_generating:
        return w.num_pending
    return max(0, w.num_pending - 1)


def schedule(
    work: Sequence[SeqWork],
    *,
    max_tokens: int,
    max_prefill_chunk: int,
    free_cells: int,
    start: int = 0,
) -> BatchPlan:
    """Plan one batch. `work` should be in a stable order (e.g. by key); `start` rotates."""
    ordered = _rotated(work, start)
    budget = max(0, min(max_tokens, free_cells))
    chunks: list[Chunk] = []
    deferred: list[int] = []

    decoders = [w for w in ordered if w.is_generating and w.num_pending - w.num_draft == 1]
    placed: list[tuple[int, SeqWork]] = []
    for w in decoders:
        if budget > 0:
            placed.append((len(chunks), w))
            chunks.append(Chunk(w.key, 1, True))
            budget -= 1
        else:
            deferred.append(w.key)
    # Drafts only take room the decoders left, each sequence's as far as it fits.
    for i, w in placed:
        extra = min(w.num_draft, budget)
        if extra > 0:
            chunks[i] = Chunk(w.key, 1 + extra, True, 1 + extra)
            budget -= extra

    prefill_budget = min(budget, max_prefill_chunk) if chunks else budget
    prefillers = [w for w in ordered if w.num_pending - w.num_draft > 1 and w.is_generating]
    prefillers += [w for w in ordered if w.num_pending > 1 and not w.is_generating]
    for w in prefillers:
        want = schedulable(w)
        n = min(want, max_prefill_chunk, prefill_budget)
        if n <= 0:
            deferred.append(w.key)
            continue
        chunks.append(_prefill_chunk(w, n))
        prefill_budget -= n
    return BatchPlan(_fit_few(chunks), tuple(deferred))


def _split(c: Chunk) -> tuple[Chunk | None, Chunk | None]:
    """`c` as its rows that choose no token and its rows that choose one (see the module
    doc): a chunk without logits chooses none; a prompt's last chunk, only its last
    `FINAL_ROWS` rows; a token and its drafts, or a prompt's last rows and drafts, all."""
    if not c.wants_logits:
        return c, None
    if c.num_logits == 1 and c.num_tokens > FINAL_ROWS:
        return Chunk(c.key, c.num_tokens - FINAL_ROWS, False), Chunk(c.key, FINAL_ROWS, True)
    return None, c


def _fit_few(chunks: list[Chunk]) -> tuple[Chunk, ...]:
    """`chunks`, with drafts cut so that the rows choosing tokens stay under
    `TILE_ROWS` where more than one sequence chooses (policy 4): each draft is cut to
    the longest length that lets all fit, and none if even that does not."""
    choosing = [c for c in (_split(c)[1] for c in chunks) if c is not None]
    total = sum(c.num_tokens for c in choosing)
    if total < TILE_ROWS or len(choosing) < 2:
        return tuple(chunks)
    drafts = [c.num_logits - 1 for c in choosing]
    # (too many sequences for a few-row decode even without drafts: no drafts at all)
    room = max(0, TILE_ROWS - 1 - (total - sum(drafts)))
    cap = max(drafts)
    while cap > 0 and sum(min(d, cap) for d in drafts) > room:
        cap -= 1
    fitted = []
    for c in chunks:
        cut = c.num_logits - 1 - cap if c.wants_logits else 0
        if cut > 0:
            c = Chunk(c.key, c.num_tokens - cut, True, c.num_logits - cut)
        fitted.append(c)
    return tuple(fitted)


def _prefill_chunk(w: SeqWork, n: int) -> Chunk:
    """The first `n` pending tokens of a prefilling sequence. A generating one's last
    prompt token has logits when the chunk reaches it, and so has each draft after it
    that the chunk holds (a prompt asked again is drafted from its remembered answer)."""
    if not w.is_generating:
        return Chunk(w.key, n, False)
    prompt = w.num_pending - w.num_draft
    if n < prompt:
        return Chunk(w.key, n, False)
    return Chunk(w.key, n, True, 1 + n - prompt)


def group_by_adapter(
    chunks: Sequence[Chunk], adapter_of: Mapping[int, str | None]
) -> list[tuple[str | None, tuple[Chunk, ...]]]:
    """Split a plan's chunks into one decode per LoRA adapter (llama.cpp applies adapters
    per context, so one decode runs with one adapter): groups in the order their first
    chunk comes, chunks in plan order within each. `adapter_of` maps a chunk's key to its
    sequence's adapter (None: the base model)."""
    groups: dict[str | None, list[Chunk]] = {}
    for c in chunks:
        groups.setdefault(adapter_of.get(c.key), []).append(c)
    return [(adapter, tuple(cs)) for adapter, cs in groups.items()]


def exact_decodes(chunks: Sequence[Chunk]) -> list[tuple[Chunk, ...]]:
    """The decodes that carry out `chunks` (in order): one, unless they make `TILE_ROWS`
    rows or more; then first the rows that choose no token (prompt chunks without
    logits, and each prompt chunk with logits but its last `FINAL_ROWS` rows) and then
    the rest, so that every row that chooses a token is decoded by fewer rows (see the
    module doc; the second decode is tiled too only if its own rows reach that)."""
    if sum(c.num_tokens for c in chunks) < TILE_ROWS:
        return [tuple(chunks)]
    silent: list[Chunk] = []
    choosing: list[Chunk] = []
    for c in chunks:
        quiet, chooses = _split(c)
        if quiet is not None:
            silent.append(quiet)
        if chooses is not None:
            choosing.append(chooses)
    return [tuple(d) for d in (silent, choosing) if d]
