"""The command line of Juggler's llama.cpp backend (`python -m juggler.engine`):
`EngineFlags`, one field a flag, and `flag_of`, a field's flag.

The backend builds its argparse from these fields, the manager's recipe writes argv with
`EngineFlags.to_argv()`, and a client's `llamacpp_args` is parsed against them
(`engine_args.parse_llamacpp_args`) before anything is queued or evicted, so a bad flag
is a 400 that names it. The fields an engine flag shares with a load option or a setting
(ctx_size, workers, parallel, threads) are declared once in `juggler.option_fields`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from juggler.kv_cache import DEFAULT_KV_TYPE, KvCacheType
from juggler.option_fields import CTX_SIZE, MAX_KV_CELLS, PARALLEL, THREADS, WORKERS, unit

FlashAttn = Literal["auto", "on", "off"]


class EngineFlags(BaseModel):
    """Flags of `python -m juggler.engine` that shape its engine (not its identity: model
    path, name, host, port and type are given by the manager, never by a client)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ctx_size: int = CTX_SIZE
    workers: int = WORKERS
    parallel: int = PARALLEL
    threads: int = THREADS
    threads_batch: int | None = Field(
        None,
        ge=1,
        le=512,
        description="CPU threads per engine worker for decodes of more than one token "
        "(prompts, several sequences at once): llama-server's --threads-batch (default: "
        "as many as --threads, or the compute plan, give).",
        json_schema_extra=unit("threads"),
    )
    kv_cells: int = Field(
        0,
        ge=0,
        le=MAX_KV_CELLS,
        description="KV cells of each worker's context, shared by its sequences (0: ctx-size).",
        json_schema_extra=unit("cells"),
    )
    n_gpu_layers: int = Field(
        0, ge=0, le=100000, description="Layers offloaded to the GPU (0: CPU only)."
    )
    batch_size: int = Field(
        512,
        ge=1,
        le=65536,
        description="Most tokens in one decode.",
        json_schema_extra=unit("tokens"),
    )
    prefill_chunk: int = Field(
        256,
        ge=1,
        le=65536,
        description="Most prompt tokens a tick prefills while others decode.",
        json_schema_extra=unit("tokens"),
    )
    stream_queue_size: int = Field(
        256,
        ge=1,
        le=1 << 20,
        description="Unconsumed events after which a slow stream is ended.",
        json_schema_extra=unit("events"),
    )
    flash_attn: FlashAttn = Field(
        "auto",
        description="llama.cpp flash attention (auto: on where supported, and always for a "
        "quantized V cache).",
    )
    cache_type_k: KvCacheType = Field(
        DEFAULT_KV_TYPE, description="KV cache type of the keys (the cache_type_k option)."
    )
    cache_type_v: KvCacheType = Field(
        DEFAULT_KV_TYPE, description="KV cache type of the values (the cache_type_v option)."
    )
    mmap: Literal["on", "off"] = Field(
        "on",
        description="Map the model file into memory (llama.cpp's default); off reads it "
        "into RAM (llama-server's --no-mmap, which llamacpp_args also takes).",
    )
    cache_cells: int | None = Field(
        None,
        ge=0,
        description="KV cells kept for prefix reuse by stateless requests (default: ctx-size / 8).",
        json_schema_extra=unit("cells"),
    )
    parked_cells: int | None = Field(
        None,
        ge=0,
        description="Tokens of cached prefixes an idle worker parks in host memory for later "
        "reuse (default: ctx-size; 0 turns parking off).",
        json_schema_extra=unit("tokens"),
    )

    speculative: Literal["on", "off"] = Field(
        "on",
        description="Prompt-lookup speculative decoding by default (a request's `speculative` "
        "overrides it); greedy and sampled output are the same either way.",
    )
    spec_draft_max: int = Field(
        128,
        ge=1,
        le=128,
        description="Most draft tokens one sequence verifies in one decode.",
        json_schema_extra=unit("tokens"),
    )
    max_active_adapters: int = Field(
        4,
        ge=1,
        le=64,
        description="LoRA adapters a worker keeps loaded at once (seed 004's MaxActiveAdapter); "
        "a request needing one more waits.",
        json_schema_extra=unit("adapters"),
    )
    stall_timeout: float = Field(
        120.0,
        gt=0,
        le=86400,
        description="Seconds a worker may hold work without finishing a step before the "
        "backend reports itself stalled (its /health answers 503 and the router restarts it).",
        json_schema_extra=unit("s"),
    )
    park_memory_mb: int = Field(
        1024,
        ge=0,
        le=1 << 20,
        description="Parked sessions' KV a worker keeps in host memory; past it, on disk.",
        json_schema_extra=unit("MiB"),
    )
    image_encode: Literal["background", "inline"] = Field(
        "background",
        description="Where a vision model's projector encodes an image while other streams "
        "decode: on a thread of its own beside the worker (background), or in the worker's "
        "tick, the other streams waiting (inline).",
    )

    reasoning_format: Literal["auto", "deepseek", "none"] = Field(
        "auto",
        description="A reasoning model's thinking: apart from the answer (auto, deepseek: "
        "reasoning_content, thinking), or left in the content (none); llama-server's flag.",
    )
    reasoning_budget: int = Field(
        -1,
        ge=-1,
        le=0,
        description="llama-server's: -1 a reasoning model thinks unless a request turns it "
        "off; 0 it does not think unless a request turns it on.",
    )
    grammar: str | None = Field(
        None,
        max_length=1 << 20,
        description="llama-server's: a GBNF grammar for the whole output of every request "
        "that gives no grammar, schema, response format or tools of its own.",
    )

    @property
    def n_cells(self) -> int:
        """KV cells of one worker's context: `kv_cells`, or `ctx_size` when 0."""
        return self.kv_cells or self.ctx_size

    def to_argv(self) -> list[str]:
        """`--flag value` pairs for every field that is set (None fields are left out)."""
        argv: list[str] = []
        for name, value in self.model_dump().items():
            if value is not None:
                argv += [flag_of(name), str(value)]
        return argv


def flag_of(name: str) -> str:
    """The command-line flag of an `EngineFlags` field: `ctx_size` -> `--ctx-size`."""
    return "--" + name.replace("_", "-")
