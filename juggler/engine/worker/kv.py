"""A worker's KV bookkeeping: what its cells hold, and every edit of its sequences' KV.

`KvBook` owns the KV side of a worker (on its thread only): counting cells, the one
rollback of a sequence (`rollback`), cached sequences of finished stateless requests
(reuse, eviction, their cell budget and the recent hit rate that decides it), parking
cached prefixes and idle sessions in host memory, and compaction. Which session holds which sequence is
the `SessionTable`'s; the choices themselves are the pure functions of `prefix_cache`.

Keeping cells lean matters because with a unified KV cache every decode attends over all
cells up to the highest one in use: cached prefixes and scattered sequences slow every
stream. So an idle worker (nothing to do for `IDLE_WAIT_S`) parks its cached prefixes
(`park_cached`, see `parking`) and compacts its sequences (`compact`).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence

from juggler.engine.cache.parking import Parked, ParkedStore
from juggler.engine.cache.prefix_cache import (
    HIT_WINDOW,
    MIN_SHARED,
    CachedSeq,
    Reuse,
    cache_budget,
    choose_evictions,
    choose_reuse,
    choose_share,
    most_kept,
    over_budget,
    worth_reusing,
)
from juggler.engine.cache.spill import SpillStore, size_of
from juggler.engine.llama.ports import LlamaContext
from juggler.engine.schedule.messages import AdapterRef
from juggler.engine.worker.session import NO_SEQ, Session, SessionState
from juggler.engine.worker.table import SessionTable

log = logging.getLogger(__name__)


class KvBook:
    def __init__(
        self,
        ctx: LlamaContext,
        table: SessionTable,
        *,
        cache_cells: int,
        parked_cells: int,
        park_budget_bytes: int = 1 << 30,
        worker_id: int = 0,
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.n_ctx = ctx.n_ctx
        #: Tokens one sequence may hold (--ctx-size; the worker sets it, at most n_ctx).
        self.max_seq = self.n_ctx
        self.worker_id = worker_id
        #: Most KV cells that cached sequences of finished stateless requests may keep.
        self.cache_cells = cache_cells
        #: For the last few stateless requests: did each reuse a useful cached prefix?
        self.recent_hits: collections.deque[bool] = collections.deque(maxlen=HIT_WINDOW)
        self.parked = ParkedStore(parked_cells)
        self.spill = SpillStore(park_budget_bytes, worker_id)
        self.num_compactions = 0
        #: Prefixes shared with a new request's sequence (`share`).
        self.num_shares = 0
        self.num_session_parks = 0
        self.num_session_restores = 0
        self._removals_at_compaction = 0

    # -- counting --------------------------------------------------------------------
    def used(self) -> int:
        return sum(len(s.tokens) for s in self.table.values() if s.has_seq)

    def free(self) -> int:
        return self.n_ctx - self.used()

    def live(self) -> int:
        """Cells that live (not cached) sequences hold or will hold for pending input."""
        return sum(
            len(s.tokens) + len(s.pending)
            for s in self.table.values()
            if s.state is not SessionState.CACHED and s.has_seq
        )

    # -- editing one sequence ------------------------------------------------------------
    def rollback(self, s: Session, keep: int, *, kv_lost: bool = False) -> None:
        """The one way a sequence's KV shrinks: `s` keeps its first `keep` tokens in the
        KV cache and drops the rest (from the cache and from `s.tokens`).

        When the memory cannot remove a partial range (e.g. sliding-window caches), or the
        caller says the KV is already gone (`kv_lost`), the whole sequence is removed and
        its first `keep` tokens go back to the front of its pending input, to be decoded
        again: the conversation is never lost, only its KV."""
        if keep > 0 and not kv_lost and self.ctx.seq_rm(s.seq_id, keep, -1):
            del s.tokens[keep:]
            return
        self.ctx.seq_rm(s.seq_id, -1, -1)
        s.pending[:0] = s.tokens[:keep]
        s.tokens.clear()

    def release(self, s: Session) -> None:
        """Remove a session and every cell of its sequence."""
        self.table.remove(s)
        if s.has_seq:  # seq_rm(-1, ...) would clear every sequence
            self.ctx.seq_rm(s.seq_id, -1, -1)
        else:
            self.spill.drop(s.parked_kv)
            s.parked_kv = None

    # -- parked sessions (see `session`) -------------------------------------------------
    def park_session(self, s: Session) -> None:
        """Copy an idle session's KV out to host memory and free its sequence."""
        assert s.has_seq and s.generation is None
        state = self.ctx.seq_state(s.seq_id) if s.tokens else None
        self.ctx.seq_rm(s.seq_id, -1, -1)
        if state is None and s.tokens:  # could not be copied: decode it again later
            s.pending[:0] = s.tokens
            s.tokens.clear()
        s.parked_kv = state
        s.seq_id = NO_SEQ
        self.num_session_parks += 1
        self._keep_parked_within_budget()

    def _keep_parked_within_budget(self) -> None:
        """Past the budget, the least recently used parked KV copies go to disk."""
        held = [s for s in self.table.values() if not s.has_seq and size_of(s.parked_kv)]
        total = sum(size_of(s.parked_kv) for s in held)
        for s in sorted(held, key=lambda s: s.last_used):
            if not self.spill.over_budget(total):
                return
            size = size_of(s.parked_kv)
            s.parked_kv = self.spill.spill(s.parked_kv, s.session_id)
            if size_of(s.parked_kv):
                return  # could not be written: it stays in memory
            total -= size

    def unpark_session(self, s: Session, seq_id: int) -> None:
        """Give a parked session the free sequence `seq_id` and copy its KV back in;
        if it does not fit or cannot be restored, its tokens are decoded again."""
        assert not s.has_seq
        state, s.parked_kv = self.spill.load(s.parked_kv), None
        fits = bool(s.tokens) and self.make_room(len(s.tokens)) >= len(s.tokens)
        s.seq_id = seq_id
        self.num_session_restores += 1
        restored = state is not None and fits and self.ctx.restore_seq_state(seq_id, state)
        if not s.tokens or restored:
            return
        self.ctx.seq_rm(seq_id, -1, -1)
        s.pending[:0] = s.tokens
        s.tokens.clear()

    # -- cached sequences ------------------------------------------------------------------
    def evict(self, seq_id: int) -> list[int]:
        """Forget the cached sequence `seq_id` (if any), free its cells, return its tokens."""
        s = self.table.cached_at(seq_id)
        if s is not None:
            self.table.remove(s)
        self.ctx.seq_rm(seq_id, -1, -1)
        return s.tokens if s is not None else []

    def make_room(self, cells: int) -> int:
        """Evict cached sequences, least recently used first, until `cells` cells are free
        (or none is left); returns the free cells."""
        free = self.free()
        if cells > free:
            for key in choose_evictions(self.table.cached(), cells - free):
                self.evict(key)
            free = self.free()
        return free

    def take_seq(self) -> int | None:
        """A sequence id for a new session: a free one, else the least recently used
        cached sequence's (evicted); None when live sessions hold every sequence."""
        key = choose_reuse(self.table.cached(), self.table.free_seq_ids(), ()).key
        if key is not None and self.table.cached_at(key) is not None:
            self.evict(key)
        return key

    def reuse_for(self, prompt: Sequence[int], adapter: str | None = None) -> Reuse:
        """Where a stateless prompt run with `adapter` goes (`prefix_cache.choose_reuse`),
        after restoring a parked prefix into that sequence when it shares more than the
        KV cache offers."""
        reuse = choose_reuse(self.table.cached(), self.table.free_seq_ids(), prompt, adapter)
        key = reuse.key
        if key is None:
            return reuse
        found = self.parked.best(prompt, better_than=reuse.keep, adapter=adapter)
        if found is not None:
            entry, shared = found
            keep = min(shared, most_kept(len(prompt)))
            reuse = Reuse(key, keep if self.unpark(entry, key) else 0)
        holders = [
            CachedSeq(s.seq_id, tuple(s.tokens), s.last_used, s.adapter_id)
            for s in self.table.values()
            if s.has_seq and s.seq_id != key
        ]
        share = choose_share(
            holders, prompt[: most_kept(len(prompt))], adapter, better_than=reuse.keep
        )
        if share.key is not None:
            self.share(share.key, key, share.keep)
            reuse = Reuse(key, share.keep)
        return reuse

    def share(self, src: int, dst: int, length: int) -> None:
        """Sequence `dst` (evicting what it cached) becomes a cached sequence holding the
        first `length` tokens of sequence `src`, sharing its cells (`prefix_cache.
        choose_share`). The cells count for both in `used`, so the budget errs on the
        safe side; a removal from either leaves the other's tags alone."""
        holder = next(s for s in self.table.values() if s.seq_id == src and s.has_seq)
        self.evict(dst)
        self.ctx.seq_cp(src, dst, 0, length)
        self.num_shares += 1
        self.table.add(
            Session(
                f"shared-{dst}",
                dst,
                is_ephemeral=True,
                state=SessionState.CACHED,
                tokens=holder.tokens[:length],
                last_used=holder.last_used,
                adapter=holder.adapter,
            )
        )

    def start_ephemeral(
        self,
        request_id: str,
        prompt: Sequence[int],
        reuse: Reuse,
        adapter: AdapterRef | None = None,
    ) -> Session:
        """The session of a stateless request on sequence `reuse.key`, keeping the first
        `reuse.keep` tokens that the cached sequence there holds; counts the hit."""
        assert reuse.key is not None
        s = Session(
            request_id,
            reuse.key,
            is_ephemeral=True,
            tokens=self._take_cached(reuse.key),
            pending=list(prompt[reuse.keep :]),
            adapter=adapter,
        )
        self.rollback(s, reuse.keep)
        s.num_reused = s.n_past
        self.table.add(s)
        self.recent_hits.append(worth_reusing(s.num_reused, len(prompt)))
        return s

    def _take_cached(self, seq_id: int) -> list[int]:
        """Forget the cached sequence `seq_id` and hand over its tokens: the caller takes
        over its KV."""
        s = self.table.cached_at(seq_id)
        if s is None:
            return []
        self.table.remove(s)
        return s.tokens

    def on_generation_end(self, s: Session) -> None:
        """A stateless request's sequence stays cached for prefix reuse, within the cell
        budget (only while recent requests hit the cache; the newest is always kept)."""
        if not s.is_ephemeral:
            s.state = SessionState.IDLE
            return
        s.pending.clear()  # the last sampled token: never decoded
        s.state = SessionState.CACHED
        budget = cache_budget(self.cache_cells, self.recent_hits)
        for key in over_budget(self.table.cached(), budget, keep=s.seq_id):
            self.evict(key)

    # -- idle upkeep ----------------------------------------------------------------------
    def park_cached(self) -> None:
        """Move cached prefixes out of the KV cache into the parked store (see `parking`),
        so they stop widening every decode; tiny ones (under `MIN_SHARED` tokens) are just
        dropped."""
        if not self.parked.max_cells:
            return  # parking is off: cached prefixes stay in the KV cache
        for s in list(self.table.values()):
            if s.state is not SessionState.CACHED:
                continue
            if len(s.tokens) >= MIN_SHARED:
                state = self.ctx.seq_state(s.seq_id)
                if state is not None:
                    self.parked.add(Parked(tuple(s.tokens), state, s.last_used, s.adapter))
            self.evict(s.seq_id)

    def unpark(self, entry: Parked, seq_id: int) -> bool:
        """Copy a parked prefix back into sequence `seq_id` (evicting what it cached) as a
        cached sequence; False (and the entry is dropped) if it does not fit."""
        self.parked.take(entry)
        self.evict(seq_id)
        if self.free() < len(entry.tokens):
            return False
        if not self.ctx.restore_seq_state(seq_id, entry.state):
            self.ctx.seq_rm(seq_id, -1, -1)
            return False
        self.table.add(
            Session(
                f"parked-{seq_id}",
                seq_id,
                is_ephemeral=True,
                state=SessionState.CACHED,
                tokens=list(entry.tokens),
                last_used=entry.last_used,
                adapter=entry.adapter,
            )
        )
        return True

    def compact(self) -> int:
        """Move every sequence's KV down into the lowest free cells (idle workers only);
        returns how many moved.

        With a unified KV cache every decode attends over the cells up to the highest
        one in use, masked or not. After a burst of requests ends, the sequences that stay
        (sessions, cached prefixes) are scattered up to where the burst reached, and a
        lone stream afterwards decodes measurably slower (SmolLM2, 2 cores: 13.0 vs 10.9
        ms a token with one 168-token sequence left at the top of 2,700 used cells). So
        after IDLE_WAIT_S with nothing to do, if anything was removed since the last time,
        each sequence is copied out, removed and put back, which llama.cpp places in the
        first free run of cells. One sequence at a time, so the extra memory is one
        sequence's KV. A sequence whose copy cannot be put back loses its KV only:
        a cached one is forgotten, a session's tokens go back to pending input and are
        decoded again (as appended input is), so no conversation is lost.
        """
        if self.ctx.num_removals == self._removals_at_compaction:
            return 0
        moved = 0
        for s in sorted(self.table.values(), key=lambda s: s.seq_id):
            if not s.tokens or not s.has_seq:
                continue
            state = self.ctx.seq_state(s.seq_id)
            if state is None:
                continue
            self.ctx.seq_rm(s.seq_id, -1, -1)
            if self.ctx.restore_seq_state(s.seq_id, state):
                moved += 1
                continue
            log.warning(
                "worker %d: KV of sequence %d could not be restored", self.worker_id, s.seq_id
            )
            if s.state is SessionState.CACHED:
                self.evict(s.seq_id)
            else:
                self.rollback(s, s.n_past, kv_lost=True)
        self._removals_at_compaction = self.ctx.num_removals
        self.num_compactions += 1
        return moved
