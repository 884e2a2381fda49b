"""A worker's fixed configuration and the snapshot it publishes after every tick."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerConfig:
    n_ctx: int
    n_batch: int
    n_seq_max: int
    n_threads: int
    max_prefill_chunk: int = 256
    flash_attn: int = -1
    #: Cell budget of cached (finished stateless) sequences; None: an eighth of n_ctx.
    cache_cells: int | None = None
    #: Tokens of cached prefixes parked outside the KV cache when idle; None: n_ctx.
    parked_cells: int | None = None


@dataclass(frozen=True)
class WorkerSnapshot:
    """Published by the worker thread after every tick; read by routes for metrics."""

    num_running: int = 0
    num_waiting: int = 0
    num_sessions: int = 0
    num_cached: int = 0
    kv_used: int = 0
    kv_total: int = 0
    num_decodes: int = 0
    decode_s: float = 0.0
    num_compactions: int = 0
    num_parked: int = 0
    parked_cells: int = 0
