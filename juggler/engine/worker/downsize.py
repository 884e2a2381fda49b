"""Seed 002's soft idle in a worker: downsize (free the context) and restore.

"After `downsize_idle_timeout` idle, a llama.cpp backend frees its contexts (KV cache and
compute buffers) and keeps the weights mapped. Open sessions are not lost: their KV
state is saved to host memory [...] and restored on their next input. The next request
restores the contexts transparently." (issue 11, after seed 002)

`SoftIdle` runs on the worker thread. `downsize` parks every idle session and cached
prefix (each sequence's KV copied to host memory, see `KvBook.park_session`) and releases
the `ContextSlot`; `restore` makes the context again before the next command that needs
it. Sessions then come back one by one, on their next input, exactly as parked sessions
always do (see `session`).
"""

from __future__ import annotations

import logging
from typing import Any

from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.session_api import SessionApi
from juggler.engine.worker.table import SessionTable

log = logging.getLogger(__name__)


class SoftIdle:
    def __init__(
        self, ctx: ContextSlot, table: SessionTable, api: SessionApi, worker_id: int = 0
    ) -> None:
        self.ctx = ctx
        self.table = table
        self.api = api
        self.worker_id = worker_id
        #: Contexts made again after a downsize.
        self.num_restores = 0

    def downsize(self) -> dict[str, Any]:
        """Park everything and free the context; the weights stay. Refused while anything
        runs or waits: the manager only downsizes idle models, and a request that came
        first wins (seed 002's rescue)."""
        if self.ctx.is_released:
            return {"downsized": True, "context_bytes": 0, "vram_bytes": 0, "sessions_parked": 0}
        if self.table.is_generating() or self.api.waiting:
            return {"downsized": False, "reason": "busy"}
        parked = self._park_all()
        freed, vram = self.ctx.bytes, sum(n for _, n in self.ctx.devices)
        self.ctx.release()
        log.info("worker %d: downsized (context freed, %d sessions parked)", self.worker_id, parked)
        return {
            "downsized": True,
            "context_bytes": freed,
            "vram_bytes": vram,
            "sessions_parked": parked,
        }

    def _park_all(self) -> int:
        """Park every idle session and cached prefix; returns how many sessions."""
        api, kv = self.api, self.api.kv
        num = 0
        for s in list(self.table.values()):
            if s.is_ephemeral or not s.has_seq:
                continue
            assert s.generation is None, "parking a generating session"
            api.inputs.drop_speculation(s)
            kv.park_session(s)
            num += 1
        kv.park_cached()
        for s in list(self.table.values()):
            if s.is_ephemeral:
                kv.evict(s.seq_id)
        return num

    def restore(self) -> None:
        """Make the context again (before work that needs it)."""
        if self.ctx.is_released:
            self.ctx.ensure()
            self.num_restores += 1
            log.info("worker %d: restored in %.0f ms", self.worker_id, self.ctx.last_make_s * 1e3)
