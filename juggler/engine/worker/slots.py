"""llama.cpp's slots, for a worker: one slot per sequence of its KV cache.

llamacpp.md, `GET /slots`: "Slots are parallel processing contexts that can handle
multiple requests concurrently"; each shows `id`, `state` ("idle", "processing"),
`next_token` (`has_next_token`, `n_remain`, `n_decoded`), `task_id` ("-1 if idle") and
`cache_tokens` ("Number of cached tokens in the slot's prompt cache"). In Juggler a
worker's sequence holds a running request, a client's session, a cached prefix of a
finished request, or nothing. `erase` "removes all cached context from the slot": a
cached prefix is forgotten; a running request or a client's session is not erased
(Conflict: the request would fail, the session lose its conversation).

Read and changed on the worker thread only.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.session import Session
from juggler.engine.worker.table import SessionTable
from juggler.errors import Conflict


@dataclass(frozen=True)
class SlotState:
    """One sequence as llama.cpp's /slots shows a slot (its id is given by the engine)."""

    is_processing: bool = False
    n_decoded: int = 0
    n_remain: int = 0
    task_id: int = -1
    cache_tokens: int = 0

    def as_json(self, slot_id: int, n_ctx: int) -> dict[str, Any]:
        return {
            "id": slot_id,
            "n_ctx": n_ctx,
            "state": "processing" if self.is_processing else "idle",
            "is_processing": self.is_processing,
            "next_token": {
                "has_next_token": self.is_processing,
                "n_remain": self.n_remain,
                "n_decoded": self.n_decoded,
            },
            "task_id": self.task_id,
            "cache_tokens": self.cache_tokens,
        }


#: Every empty sequence's state (a snapshot holds one per sequence: 64 with `--parallel
#: 64`, taken as requests start and end).
_EMPTY = SlotState()


def _state(s: Session | None) -> SlotState:
    if s is None:
        return _EMPTY
    gen = s.generation
    if gen is None:
        return SlotState(cache_tokens=s.n_past)
    return SlotState(
        is_processing=True,
        n_decoded=gen.num_generated,
        n_remain=max(0, gen.max_new_tokens - gen.num_generated),
        task_id=zlib.crc32(s.session_id.encode()) & 0x7FFFFFFF,
        cache_tokens=s.n_past,
    )


def slot_states(table: SessionTable) -> tuple[SlotState, ...]:
    """Every sequence of the worker, in sequence-id order."""
    by_seq = table.by_seq()
    return tuple(_state(by_seq.get(i)) for i in range(table.n_seq_max))


def erase(table: SessionTable, kv: KvBook, seq_id: int) -> dict[str, Any]:
    """Forget what sequence `seq_id` caches; Conflict while it is in use."""
    s = table.by_seq().get(seq_id)
    if s is not None and s.generation is not None:
        raise Conflict(f"slot {seq_id} is processing a request")
    if s is not None and not s.is_ephemeral:
        raise Conflict(
            f"slot {seq_id} holds session {s.session_id}: end the session to free it",
            param="id_slot",
        )
    return {"n_erased": len(kv.evict(seq_id)) if s is not None else 0}
