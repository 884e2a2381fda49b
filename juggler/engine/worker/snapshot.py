"""What a worker publishes after every tick for /stats, /health and /metrics: one
immutable `WorkerSnapshot` read from its parts (on the worker thread).

It reads a `WorkerParts`, the parts it needs by name; `worker.Worker` is one (the
worker imports this module, never the other way round)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from juggler.engine.worker.config import WorkerSnapshot
from juggler.engine.worker.slots import slot_states

if TYPE_CHECKING:
    from juggler.engine.worker.adapters import AdapterSet
    from juggler.engine.worker.context_slot import ContextSlot
    from juggler.engine.worker.decoder import Decoder
    from juggler.engine.worker.downsize import SoftIdle
    from juggler.engine.worker.generation import Generations
    from juggler.engine.worker.kv import KvBook
    from juggler.engine.worker.session import Session
    from juggler.engine.worker.session_api import SessionApi
    from juggler.engine.worker.table import SessionTable


class WorkerParts(Protocol):
    """The parts of a worker that a snapshot reads."""

    table: SessionTable
    kv: KvBook
    api: SessionApi
    ctx: ContextSlot
    decoder: Decoder
    soft_idle: SoftIdle
    gens: Generations
    adapters: AdapterSet


def take_snapshot(w: WorkerParts) -> WorkerSnapshot:
    table, kv, api, ctx = w.table, w.kv, w.api, w.ctx
    parked = kv.parked
    return WorkerSnapshot(
        num_running=table.num_running(),
        num_waiting=len(api.waiting) + len(api.pending),
        num_sessions=table.num_api_sessions(),
        num_cached=table.num_cached(),
        kv_used=kv.used(),
        kv_total=kv.n_ctx,
        num_decodes=w.decoder.num_decodes,
        decode_s=w.decoder.decode_s,
        max_batch_seqs=w.decoder.max_batch_seqs,
        num_compactions=kv.num_compactions,
        num_shares=kv.num_shares,
        num_parked=len(parked.entries),
        parked_cells=parked.cells,
        num_parked_sessions=table.num_parked(),
        session_parks=kv.num_session_parks,
        session_restores=kv.num_session_restores,
        spilled_bytes=kv.spill.spilled_bytes,
        tokens_running=sum(
            s.n_past + len(s.pending) for s in table.values() if s.generation is not None
        ),
        tokens_waiting=sum(len(c.prompt) for c in api.waiting),
        is_downsized=ctx.is_released,
        context_bytes=0 if ctx.is_released else ctx.bytes,
        context_devices=() if ctx.is_released else ctx.devices,
        num_restores=w.soft_idle.num_restores,
        last_restore_s=ctx.last_make_s if w.soft_idle.num_restores else 0.0,
        spec_drafted=w.gens.num_drafted,
        spec_accepted=w.gens.num_accepted,
        adapters_loaded=w.adapters.loaded,
        adapters_running=_ids(
            s.adapter_id for s in table.values() if s.generation is not None and s.has_seq
        ),
        adapters_waiting=_ids(
            [c.adapter.adapter_id for c in api.waiting if c.adapter is not None]
            + [s.adapter_id for s in table.values() if _waits_for_adapter(w, s)]
        ),
        slots=slot_states(table),
    )


def _ids(ids: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(sorted({i for i in ids if i is not None}))


def _waits_for_adapter(w: WorkerParts, s: Session) -> bool:
    """A session with work that cannot run until its adapter is loaded."""
    has_work = (
        s.generation is not None or (s.pending and s.has_seq) or w.api.pending.has(s.session_id)
    )
    return bool(has_work) and s.adapter is not None and not w.adapters.is_loaded(s.adapter)
