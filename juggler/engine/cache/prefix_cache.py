"""Pure policy for reusing finished sequences' KV for stateless requests.

A stateless request (`/v1/chat/completions`, `/v1/completions`) runs as an ephemeral
session. When it finishes, its sequence is kept in the worker's KV as a *cached* sequence
(its tokens remembered) until the cells or the sequence id are needed. A new stateless
request on that worker takes over the cached sequence with the longest common token
prefix, removes only the tail after that prefix (`llama_memory_seq_rm(seq, L, -1)`) and
prefills just the rest. At least one prompt token is always decoded again, because the
first generated token needs fresh logits.

Across workers the master keeps a bounded map from prefix-block hashes to the worker
that last saw them (`prefix_keys`), so a conversation's next request lands on the worker
that holds its KV.

Cached cells are not free: with a unified KV cache every decode attends over the whole
occupied cell range (masked), so the cached sequences are capped at `--cache-cells`
(default an eighth of the context), least recently used evicted first; the sequence
that finished last is always kept. Measured on SmolLM2 with 16 cached 160-token
sequences: decode about 25% slower with 2048 cached cells, 0% with only the newest kept;
a lone stream after a burst: 13.3 ms a token with 948 cached cells, 12.0 ms with none.
So the cap only applies while the cache pays: when none of the last `HIT_WINDOW`
stateless requests reused at least `MIN_USEFUL_REUSE` cached tokens (one-off prompts),
only the newest sequence is kept, which is all a new conversation needs to start hitting.

All functions here are pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from juggler.engine.schedule.batch import FINAL_ROWS

#: Tokens per block for the master's cross-worker affinity hashes.
AFFINITY_BLOCK = 64
#: A stateless request counts as a cache hit when it reuses at least this many tokens.
MIN_USEFUL_REUSE = 64
#: How many recent stateless requests decide whether the prefix cache is paying off.
HIT_WINDOW = 16
#: A shorter shared prefix is still reused when it is at least this long (a system
#: prompt, a chat template's header) or all of a short prompt but its last token: a
#: 41-token story prompt asked again was prefilled anew every time (118 ms of a 1.4 s
#: answer on SmolLM2), where llama-server reused its slot.
MIN_SHARED = 8
#: A parked prefix shorter than `MIN_USEFUL_REUSE` is restored only from an entry at
#: most this many times longer (a restore copies the whole entry).
MAX_RESTORE_RATIO = 32


def worth_reusing(shared: int, prompt_len: int) -> bool:
    """Whether `shared` cached tokens are worth taking for a prompt of `prompt_len`
    tokens (its last token is always decoded again): a long prefix, or a short prompt's
    all but its last token, or a system prompt's worth."""
    return shared >= MIN_USEFUL_REUSE or shared >= max(1, min(MIN_SHARED, prompt_len - 1))


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def most_kept(num_prompt: int) -> int:
    """The most tokens of a prompt of `num_prompt` tokens whose KV a request may take
    from a cached, parked or shared sequence: all but the last `FINAL_ROWS`, which are
    decoded again as the first time, by few rows, so that a greedy answer asked again
    is chosen on the same KV (`schedule.batch`)."""
    return max(0, num_prompt - FINAL_ROWS)


@dataclass(frozen=True)
class CachedSeq:
    key: int
    tokens: tuple[int, ...]
    last_used: int
    #: The LoRA adapter its KV was made with: only requests with the same one reuse it.
    adapter: str | None = None


@dataclass(frozen=True)
class Reuse:
    """Take over sequence `key` keeping its first `keep` tokens (0: start it fresh)."""

    key: int | None
    keep: int


def choose_reuse(
    cached: Iterable[CachedSeq],
    free_keys: Sequence[int],
    prompt: Sequence[int],
    adapter: str | None = None,
) -> Reuse:
    """Pick a sequence for a prompt run with `adapter`: the longest shared prefix of a
    sequence cached with the same adapter wins; ties go to the most recently used. While
    a free key is left, a cached sequence is taken over only if that keeps at least as
    many of its tokens as it throws away (two one-off prompts that happen to share a
    first token must not cost the older one its cache), or if it holds the whole prompt
    (the prompt asked again: only an earlier answer to it is lost). Without a useful
    shared prefix take a free key, so another conversation's cached prefix survives (the
    cell budget, not this choice, bounds what caching costs), else recycle the least
    recently used cached sequence. `Reuse(None, 0)` means every sequence is busy."""
    best: CachedSeq | None = None
    best_len = 0
    lru: CachedSeq | None = None
    for c in cached:
        if lru is None or c.last_used < lru.last_used:
            lru = c
        n = common_prefix_len(c.tokens, prompt) if c.adapter == adapter else 0
        if n > best_len or (
            n == best_len and n > 0 and best is not None and c.last_used > best.last_used
        ):
            best, best_len = c, n
    keep = min(best_len, most_kept(len(prompt)))
    # The whole prompt inside a cached sequence: its tail is an earlier answer to this
    # very prompt (a retry, a regenerate, a benchmark's repeat), about to be answered
    # again, so it is replaced as llama-server replaces its slot's. Kept beside the new
    # sequence it would widen every decode (see the module doc).
    asked_again = best_len >= len(prompt)
    if (
        best is not None
        and keep > 0
        and (not free_keys or asked_again or 2 * keep >= len(best.tokens))
    ):
        return Reuse(best.key, keep)
    if free_keys:
        return Reuse(free_keys[0], 0)
    if lru is not None:
        return Reuse(lru.key, 0)
    return Reuse(None, 0)


def choose_share(
    holders: Iterable[CachedSeq],
    prompt: Sequence[int],
    adapter: str | None,
    better_than: int,
) -> Reuse:
    """The sequence whose KV holds the longest prefix of `prompt` made with `adapter`,
    running or cached, to share its cells with the prompt's sequence: `Reuse(key, n)` with
    `n` the shared tokens when those are `worth_reusing` (`prompt` is all of the
    request's prompt but its last token) and more than `better_than` (what the prompt's
    own sequence keeps), else `Reuse(None, 0)`.

    Concurrent requests often share a long prefix (one system prompt, one document asked
    about by eight clients). A cached sequence can be taken over by one request only;
    without sharing, the other seven would prefill the document again while the first
    holds it. With a unified KV cache, sharing costs no copy: the cells are tagged with
    the second sequence too."""
    best: CachedSeq | None = None
    best_len = 0
    for h in holders:
        if h.adapter != adapter:
            continue
        n = common_prefix_len(h.tokens, prompt)
        if n > best_len:
            best, best_len = h, n
    if best is None or not worth_reusing(best_len, len(prompt) + 1) or best_len <= better_than:
        return Reuse(None, 0)
    return Reuse(best.key, best_len)


def over_budget(cached: Iterable[CachedSeq], budget: int, keep: int | None) -> list[int]:
    """Cached sequences to drop, least recently used first, until the cached cells fit in
    `budget`; sequence `keep` (the one that just finished) is never chosen."""
    items = sorted(cached, key=lambda c: c.last_used)
    excess = sum(len(c.tokens) for c in items) - budget
    out: list[int] = []
    for c in items:
        if excess <= 0:
            break
        if c.key == keep:
            continue
        out.append(c.key)
        excess -= len(c.tokens)
    return out


def cache_budget(configured: int, recent_hits: Iterable[bool]) -> int:
    """Cells the cached sequences may hold: the configured budget while recent requests
    reuse cached prefixes, else none (`over_budget` still keeps the newest sequence)."""
    return configured if any(recent_hits) else 0


def choose_evictions(cached: Iterable[CachedSeq], cells_needed: int) -> list[int]:
    """Cached sequences to drop, least recently used first, to free `cells_needed` cells."""
    out: list[int] = []
    freed = 0
    for c in sorted(cached, key=lambda c: c.last_used):
        if freed >= cells_needed:
            break
        out.append(c.key)
        freed += len(c.tokens)
    return out


def prefix_keys(
    tokens: Sequence[int], block: int = AFFINITY_BLOCK, adapter: str | None = None
) -> tuple[int, ...]:
    """Chained hashes of each whole `block` of the prompt, then of the whole prompt when
    it does not end at a block's end; the same prompt under another LoRA adapter hashes
    differently (its KV differs). The last key sends a prompt asked again to the worker
    that answered it (issue 47: with two workers, a seeded request asked again must
    come out the same, and another worker's context decodes it over other cells)."""
    out: list[int] = []
    h = hash(adapter) if adapter is not None else 0
    end = 0
    for end in range(block, len(tokens) + 1, block):
        h = hash((h, tuple(tokens[end - block : end])))
        out.append(h)
    if end < len(tokens):
        out.append(hash((h, tuple(tokens[end:]), "whole")))
    return tuple(out)


def best_affinity(keys: Sequence[int], owners: Mapping[int, int]) -> int | None:
    """The worker holding the longest run of these prefix blocks, if any."""
    found: int | None = None
    for k in keys:
        w = owners.get(k)
        if w is None:
            break
        found = w
    return found
