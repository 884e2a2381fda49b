"""A worker's fixed configuration, its clock, and the snapshot it publishes every tick."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from juggler.engine.worker.slots import SlotState

#: How long a worker waits for commands when it has nothing to do; after that long
#: idle it parks cached prefixes and compacts its KV cells (see `kv`).
IDLE_WAIT_S = 0.5
#: Stateless requests a worker lets wait for a sequence or cells; more are refused (429).
MAX_WAITING = 256
#: How long a stateless request may wait for a sequence or cells before a 429.
QUEUE_TIMEOUT_S = 60.0
#: How long an idle worker waits for a generate before prefilling appended input alone.
EAGER_PREFILL_GRACE_S = 0.03


@dataclass(frozen=True)
class WorkerConfig:
    #: KV cells of the context (--kv-cells, else --ctx-size), shared by its sequences.
    n_ctx: int
    n_batch: int
    n_seq_max: int
    n_threads: int
    #: Threads of multi-token decodes (--threads-batch); 0: as n_threads.
    n_threads_batch: int = 0
    max_prefill_chunk: int = 256
    flash_attn: int = -1
    #: llama.cpp's `ggml_type` of the KV cache's keys and values (1: f16).
    type_k: int = 1
    type_v: int = 1
    #: Cell budget of cached (finished stateless) sequences; None: an eighth of n_ctx.
    cache_cells: int | None = None
    #: Tokens of cached prefixes parked outside the KV cache when idle; None: n_ctx.
    parked_cells: int | None = None
    #: Bytes of parked sessions' KV kept in host memory; past it they go to disk.
    park_budget_bytes: int = 1 << 30
    idle_wait_s: float = IDLE_WAIT_S
    max_waiting: int = MAX_WAITING
    queue_timeout_s: float = QUEUE_TIMEOUT_S
    eager_grace_s: float = EAGER_PREFILL_GRACE_S
    #: LoRA adapters loaded at once (seed 004's MaxActiveAdapter).
    max_active_adapters: int = 4
    #: Prompt-lookup speculative decoding for requests that do not say, and its longest draft.
    speculative: bool = True
    spec_draft_max: int = 128
    #: Tokens one sequence may hold (--ctx-size); None: n_ctx.
    max_seq_tokens: int | None = None
    #: Where a projector encodes images while other streams decode (issue 51).
    image_encode: str = "background"


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
    #: The most sequences one decode has held.
    max_batch_seqs: int = 0
    num_compactions: int = 0
    #: Prompts that started on a prefix shared from another sequence's cells.
    num_shares: int = 0
    num_parked: int = 0
    parked_cells: int = 0
    #: API sessions parked in host memory, and how often sessions were parked / restored.
    num_parked_sessions: int = 0
    session_parks: int = 0
    session_restores: int = 0
    spilled_bytes: int = 0
    #: Seed 004: tokens of the sequences generating now, and of the prompts waiting.
    tokens_running: int = 0
    tokens_waiting: int = 0
    #: Seed 002's soft idle: the context is freed; what it holds while made (RSS growth
    #: when it was made); restores after downsizes, and how long the last one took.
    is_downsized: bool = False
    context_bytes: int = 0
    #: Its context's buffers on each GPU device (KV, compute, output), as llama.cpp
    #: logged them; () while downsized or on the CPU (issue 48).
    context_devices: tuple[tuple[str, int], ...] = ()
    num_restores: int = 0
    last_restore_s: float = 0.0
    #: LoRA (seed 004): adapters loaded; run by generating requests; wanted by waiting ones.
    adapters_loaded: tuple[str, ...] = ()
    adapters_running: tuple[str, ...] = ()
    adapters_waiting: tuple[str, ...] = ()
    #: Speculative decoding: draft tokens decoded, and accepted, since start.
    spec_drafted: int = 0
    spec_accepted: int = 0
    #: llama.cpp's slots: one per sequence, in sequence-id order (worker/slots.py).
    slots: tuple[SlotState, ...] = ()


class Clock:
    """A worker's time: `tick` counts loop iterations (the LRU order of sequences; only the
    worker loop advances it) and `now()` reads seconds for request stats."""

    def __init__(self) -> None:
        self.tick = 0

    def now(self) -> float:
        return time.perf_counter()
