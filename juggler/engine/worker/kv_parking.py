"""Keeping a worker's KV cells lean: moving KV out of them and back, and packing them.

`KvParking` is the part of `KvBook` (kv.py) that owns where KV lives besides the cells
of its sequence: idle sessions parked in host memory (`park_session`, `unpark_session`;
past the budget the least recently used copies are spilled to disk, see `cache.spill`),
cached prefixes parked in the `ParkedStore` (`park_cached`, `unpark`, see `cache.
parking`), and compaction (`compact`), with their counters. The cells themselves (what
they hold, the one rollback, cached sequences and their eviction) are `KvBook`'s.

With a unified KV cache every decode attends over all cells up to the highest one in
use: cached prefixes and scattered sequences slow every stream. So an idle worker parks
its cached prefixes and compacts its sequences.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from juggler.engine.cache.parking import Parked, ParkedStore
from juggler.engine.cache.prefix_cache import MIN_SHARED
from juggler.engine.cache.spill import SpillStore, size_of
from juggler.engine.llama.ports import LlamaContext
from juggler.engine.worker.session import NO_SEQ, Session, SessionState
from juggler.engine.worker.table import SessionTable

#: The KV book's logger (these moves were its methods, and log under its name).
log = logging.getLogger("juggler.engine.worker.kv")


class KvParking:
    """Parking and compaction for `KvBook`, which sets these attributes and provides
    the cell methods declared below."""

    ctx: LlamaContext
    table: SessionTable
    worker_id: int
    parked: ParkedStore
    spill: SpillStore
    num_compactions: int
    num_session_parks: int
    num_session_restores: int
    _removals_at_compaction: int

    if TYPE_CHECKING:  # `KvBook`'s

        def free(self) -> int: ...
        def evict(self, seq_id: int) -> list[int]: ...
        def make_room(self, cells: int) -> int: ...
        def rollback(self, s: Session, keep: int, *, kv_lost: bool = False) -> None: ...

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
