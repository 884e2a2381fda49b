"""How a worker's parts are made on its context and wired to each other (`assemble`).

`Worker.open` calls it on the worker thread, once the thread exists: the llama context
(with the compute plan's threads, tuned per decode unless `--threads` fixed them), the
KV bookkeeping, the adapters, the inputs and generations, the session API, the decoder
with its media feed, and the soft-idle downsizing. Each part gets only the others it
uses; the worker keeps them and runs the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from juggler.engine.llama.chat import ChatTemplate
from juggler.engine.llama.ports import ContextParams, LlamaModel
from juggler.engine.schedule.messages import Notice
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.threads import ThreadGovernor
from juggler.engine.worker.adapters import AdapterSet
from juggler.engine.worker.config import Clock, WorkerConfig
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.decoder import Decoder
from juggler.engine.worker.downsize import SoftIdle
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.inputs import SessionInputs
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.media_feed import media_feed_for
from juggler.engine.worker.session_api import SessionApi
from juggler.engine.worker.table import SessionTable


@dataclass
class Parts:
    """A worker's parts, all owned by its thread."""

    ctx: ContextSlot
    kv: KvBook
    adapters: AdapterSet
    gens: Generations
    api: SessionApi
    decoder: Decoder
    soft_idle: SoftIdle


def assemble(
    model: LlamaModel,
    cfg: WorkerConfig,
    template: ChatTemplate,
    table: SessionTable,
    outbox: Outbox,
    notify: Callable[[Notice], None],
    clock: Clock,
    wid: int,
    governor: ThreadGovernor | None,
    crowded: Callable[[], bool],
) -> Parts:
    """Make worker `wid`'s context and the parts that use it (on the worker thread)."""
    params = ContextParams(
        n_ctx=cfg.n_ctx,
        n_batch=cfg.n_batch,
        n_ubatch=cfg.n_batch,
        n_seq_max=cfg.n_seq_max,
        n_threads=cfg.n_threads,
        n_threads_batch=cfg.n_threads_batch,
        flash_attn=cfg.flash_attn,
        type_k=cfg.type_k,
        type_v=cfg.type_v,
    )
    gov = governor
    threads = (lambda: gov.threads_for(wid)) if gov is not None else None
    # Explicit `--threads` are kept; otherwise each decode runs with the count of the
    # compute plan's threads that measures fastest (`thread_tuner`).
    tune = gov is not None and gov.fixed_threads <= 0
    ctx = ContextSlot(lambda: model.new_context(params), threads, tune=tune)
    batch = model.new_batch(cfg.n_batch)
    n_ctx = ctx.n_ctx
    kv = KvBook(
        ctx,
        table,
        cache_cells=cfg.cache_cells if cfg.cache_cells is not None else n_ctx // 8,
        parked_cells=cfg.parked_cells if cfg.parked_cells is not None else n_ctx,
        park_budget_bytes=cfg.park_budget_bytes,
        worker_id=wid,
    )
    kv.max_seq = min(cfg.max_seq_tokens or n_ctx, n_ctx)
    adapters = AdapterSet(model, ctx, cfg.max_active_adapters)
    inputs = SessionInputs(model, template, kv)
    gens = Generations(
        model,
        ctx,
        kv,
        outbox,
        notify,
        clock,
        wid,
        speculative=cfg.speculative,
        spec_draft_max=cfg.spec_draft_max,
    )
    api = SessionApi(
        table,
        kv,
        inputs,
        gens,
        outbox,
        notify,
        clock,
        adapters,
        wid,
        max_waiting=cfg.max_waiting,
        queue_timeout_s=cfg.queue_timeout_s,
    )
    gens.crowded = crowded
    decoder = Decoder(
        ctx,
        batch,
        table,
        kv,
        gens,
        api,
        outbox,
        adapters,
        max_prefill_chunk=cfg.max_prefill_chunk,
        worker_id=wid,
    )
    decoder.media = media_feed_for(model, ctx, kv, gens, cfg, wid)
    soft_idle = SoftIdle(ctx, table, api, wid)
    return Parts(ctx, kv, adapters, gens, api, decoder, soft_idle)
