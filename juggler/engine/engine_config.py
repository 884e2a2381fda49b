"""The backend's settings (`EngineConfig`: identity and engine flags) and the worker
settings derived from them."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from juggler.compute.cpus import allowed_cpus
from juggler.compute.workers import workers_for
from juggler.engine.worker.config import WorkerConfig
from juggler.kv_cache import KV_TYPES
from juggler.options import EngineFlags
from juggler.types import ModelType

_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


@dataclass(frozen=True)
class EngineConfig:
    """The backend's settings: its identity (given by the manager) and its engine flags."""

    model_path: str
    model_name: str
    type: ModelType = ModelType.LLM
    flags: EngineFlags = field(default_factory=lambda: EngineFlags.model_validate({}))
    #: The vision projector (mmproj GGUF) loaded with the model, if any (issue 51).
    mmproj: str | None = None
    #: Found beside the model, not named: the model loads without it if it fails.
    mmproj_optional: bool = False

    @functools.cached_property
    def num_workers(self) -> int:
        """The workers this backend runs (`--workers 0`: `compute.workers`'s choice)."""
        try:
            size: int | None = os.path.getsize(self.model_path)
        except OSError:
            size = None
        return workers_for(
            self.flags.workers,
            size,
            is_llm=self.type is ModelType.LLM,
            offloaded=self.flags.n_gpu_layers > 0,
            cores=len(allowed_cpus()),
        )

    @property
    def n_threads(self) -> int:
        """CPU threads per worker (`--threads 0`: all cores)."""
        return self.flags.threads or os.cpu_count() or 1


def flash_attn(flags: EngineFlags) -> int:
    """llama.cpp's flash-attention switch; on for a quantized V cache when it is
    automatic (llama.cpp keeps one only with it; `--flash-attn off` with one is refused
    before the backend starts, `engine_args.check_kv_cache`)."""
    if flags.flash_attn == "auto" and KV_TYPES[flags.cache_type_v].is_quantized:
        return _FLASH_ATTN["on"]
    return _FLASH_ATTN[flags.flash_attn]


def worker_config(config: EngineConfig) -> WorkerConfig:
    """A generation worker's settings from the engine flags."""
    f = config.flags
    batch = max(f.batch_size, f.parallel)
    return WorkerConfig(
        n_ctx=f.n_cells,
        max_seq_tokens=f.ctx_size,
        n_batch=batch,
        n_seq_max=f.parallel,
        n_threads=config.n_threads,
        n_threads_batch=f.threads_batch or 0,
        max_prefill_chunk=max(1, min(f.prefill_chunk, batch)),
        flash_attn=flash_attn(f),
        type_k=KV_TYPES[f.cache_type_k].ggml_type,
        type_v=KV_TYPES[f.cache_type_v].ggml_type,
        cache_cells=f.cache_cells,
        parked_cells=f.parked_cells,
        park_budget_bytes=f.park_memory_mb << 20,
        max_active_adapters=f.max_active_adapters,
        speculative=f.speculative == "on",
        spec_draft_max=f.spec_draft_max,
        image_encode=f.image_encode,
    )


def embed_worker_config(config: EngineConfig, n_ctx_train: int) -> WorkerConfig:
    """An embedding / reranking worker's settings: at most the model's trained context,
    and room for many short inputs at once."""
    f = config.flags
    return WorkerConfig(
        n_ctx=min(f.ctx_size, n_ctx_train or f.ctx_size),
        n_batch=max(f.batch_size, f.parallel),
        n_seq_max=max(f.parallel, 32),
        n_threads=config.n_threads,
        n_threads_batch=f.threads_batch or 0,
        flash_attn=flash_attn(f),
        type_k=KV_TYPES[f.cache_type_k].ggml_type,
        type_v=KV_TYPES[f.cache_type_v].ggml_type,
    )
