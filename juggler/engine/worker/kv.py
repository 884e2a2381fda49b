"""Keeping a worker's KV cells lean: parking cached prefixes and compacting sequences.

Both run on the worker thread only when it has been idle for `IDLE_WAIT_S` (see the
worker loop), because with a unified KV cache every decode attends over all cells up
to the highest one in use: cached prefixes and scattered sequences slow every stream.
This is the `Worker`'s half that moves KV around; `worker.py` holds the loop.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from juggler.engine.cache.parking import Parked, ParkedStore
from juggler.engine.cache.prefix_cache import MIN_USEFUL_REUSE
from juggler.engine.llama.native import Context
from juggler.engine.worker.session import Session, SessionState

log = logging.getLogger(__name__)


class KvUpkeep:
    """Mixin for `Worker`; the attributes below are the worker's."""

    worker_id: int
    ctx: Context | None
    n_ctx: int
    sessions: dict[str, Session]
    parked: ParkedStore
    _tick: int
    _num_compactions: int
    _removals_at_compaction: int

    if TYPE_CHECKING:  # provided by Worker

        def kv_used(self) -> int: ...
        def forget_cached(self, seq_id: int) -> list[int]: ...
        def ctx_seq_clear(self, seq_id: int) -> None: ...
        def _publish(self) -> None: ...

    def _park_cached(self) -> None:
        """Idle: move cached prefixes out of the KV cache into the parked store (see
        `parking`), so they stop widening every decode; tiny ones are just dropped."""
        assert self.ctx is not None
        if not self.parked.max_cells:
            return  # parking is off: cached prefixes stay in the KV cache
        for s in list(self.sessions.values()):
            if s.state is not SessionState.CACHED:
                continue
            if len(s.tokens) >= MIN_USEFUL_REUSE:
                state = self.ctx.seq_state(s.seq_id)
                if state is not None:
                    self.parked.add(Parked(tuple(s.tokens), state, s.last_used))
            self.forget_cached(s.seq_id)
            self.ctx_seq_clear(s.seq_id)
        self._publish()

    def _unpark(self, entry: Parked, seq_id: int) -> bool:
        """Copy a parked prefix back into sequence `seq_id` (clearing what it cached) as
        a cached sequence; False (and the entry is dropped) if it does not fit."""
        assert self.ctx is not None
        self.parked.take(entry)
        self.forget_cached(seq_id)
        self.ctx_seq_clear(seq_id)
        if self.n_ctx - self.kv_used() < len(entry.tokens):
            return False
        if not self.ctx.restore_seq_state(seq_id, entry.state):
            self.ctx_seq_clear(seq_id)
            return False
        sid = f"parked-{seq_id}-{self._tick}"
        self.sessions[sid] = Session(
            sid,
            seq_id,
            is_ephemeral=True,
            state=SessionState.CACHED,
            tokens=list(entry.tokens),
            last_used=entry.last_used,
        )
        return True

    def _compact(self) -> None:
        """Move every sequence's KV down into the lowest free cells (idle workers only).

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
        decoded again on its next use, so no conversation is lost.
        """
        assert self.ctx is not None
        if self.ctx.num_removals == self._removals_at_compaction:
            return
        t0 = time.perf_counter()
        moved = 0
        for s in sorted(self.sessions.values(), key=lambda s: s.seq_id):
            if not s.tokens:
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
            self.ctx.seq_rm(s.seq_id, -1, -1)
            if s.state is SessionState.CACHED:
                self.forget_cached(s.seq_id)
            else:
                s.pending[:0] = s.tokens
                s.tokens.clear()
        self._removals_at_compaction = self.ctx.num_removals
        self._num_compactions += 1
        self._publish()
        log.debug(
            "worker %d: compacted %d sequences in %.1f ms",
            self.worker_id,
            moved,
            (time.perf_counter() - t0) * 1000,
        )
