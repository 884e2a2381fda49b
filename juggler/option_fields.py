"""The declarations of the options that shape a served model: each one a pydantic `Field`
with its default, bounds, unit and help text, declared once here.

This module owns the declarations and nothing that uses them: `ModelOptions` and
`LoadOverrides` (`juggler.options`), `Settings` (config.py, the server-wide defaults) and
`EngineFlags` (`juggler.engine_flags`, the engine's command line) all take their fields
from here, so a default or a bound is written in one place. Also the names every one of
them shares: the context-size bounds (`MIN_CTX`, `MAX_CTX`, `AUTO_CTX`, `CtxSize`),
`MAX_KV_CELLS`, the `LlamacppBackend` names, and a setting's environment variable
(`env_name`: `JUGGLER_<NAME>`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from juggler.kv_cache import DEFAULT_KV_TYPE

ENV_PREFIX = "JUGGLER_"

LlamacppBackend = Literal["cpu", "vulkan", "rocm", "metal", "cuda"]


def env_name(key: str) -> str:
    """The environment variable of setting `key`, e.g. ctx_size -> JUGGLER_CTX_SIZE."""
    return ENV_PREFIX + key.upper()


def unit(name: str) -> dict[str, Any]:
    """A field's `json_schema_extra` naming its unit (the docs' tables show it)."""
    return {"unit": name}


MIN_CTX, MAX_CTX = 64, 1 << 20
#: Lemonade's `ctx_size: -1`: the size is chosen at load (`manager.auto_ctx`).
AUTO_CTX = -1

CTX_SIZE = Field(
    4096,
    ge=MIN_CTX,
    le=MAX_CTX,
    description="Context size: tokens one sequence may hold (at most the model's trained "
    "context); also a worker's KV cells unless kv_cells says more.",
    json_schema_extra=unit("tokens"),
)
#: Most KV cells of one engine worker (memory limits it long before).
MAX_KV_CELLS = 1 << 22


def _ctx_size(value: int) -> int:
    if value != AUTO_CTX and not MIN_CTX <= value <= MAX_CTX:
        raise ValueError(
            f"must be a whole number from {MIN_CTX} to {MAX_CTX}, or -1 to size it automatically"
        )
    return value


#: A load option's context size: a size, or -1 (lemonade.md: "`ctx_size` takes a positive
#: whole number, or `-1` to pin the model to automatic sizing").
CtxSize = Annotated[int, AfterValidator(_ctx_size)]
MODEL_CTX_SIZE: Any = Field(
    4096,
    description="Context size: tokens one sequence may hold (at most the model's trained "
    "context), and a worker's KV cells unless kv_cells says more; -1 sizes it at load (the "
    "model's trained context, as far as memory allows).",
    json_schema_extra={"unit": "tokens", "minimum": AUTO_CTX, "maximum": MAX_CTX},
)
LLAMACPP_BACKEND: Any = Field(
    "cpu",
    description="llama.cpp backend: cpu runs on the CPU; cuda, rocm, vulkan or metal offload "
    "layers to the GPU (n_gpu_layers) where the llama.cpp library was built for it. The "
    "default follows what `make install` built for this machine.",
)
KV_CELLS: Any = Field(
    0,
    ge=0,
    le=MAX_KV_CELLS,
    description="KV cells of one engine worker, shared by its sequences (llama-server's -c "
    "with -kvu): with parallel 64, kv_cells 16384 gives 64 streams 256 cells each on average "
    "while one may still hold ctx_size tokens; at least ctx_size; 0: as ctx_size.",
    json_schema_extra=unit("cells"),
)
N_GPU_LAYERS: Any = Field(
    -1,
    ge=-1,
    le=100000,
    description="Layers offloaded to the GPU (llama-server's -ngl, Ollama's num_gpu): -1 "
    "automatic (as many as fit in the free VRAM with their KV cache), 0 none; a GPU "
    "llamacpp_backend only.",
    json_schema_extra=unit("layers"),
)
LLAMACPP_ARGS = Field(
    "",
    max_length=4096,
    description="Extra engine flags, e.g. '--workers 2 --parallel 4' (see EngineFlags).",
)
MERGE_ARGS = Field(
    True,
    description="lemonade.md: true inherits the server-wide llamacpp_args (a model's or a "
    "load's own flags win over the same flags there); false applies only a load's own.",
)
CACHE_TYPE_K: Any = Field(
    DEFAULT_KV_TYPE,
    description="KV cache type of the keys (llama-server's --cache-type-k): f16 (llama.cpp's "
    "default); q8_0 takes about half the memory a cell, q4_0 about a quarter; also f32, "
    "bf16, q4_1, iq4_nl, q5_0, q5_1.",
)
CACHE_TYPE_V: Any = Field(
    DEFAULT_KV_TYPE,
    description="KV cache type of the values (llama-server's --cache-type-v), as "
    "cache_type_k; a quantized type needs flash attention, which is turned on for it.",
)
AUTO_EVICT = Field(False, description="Opt into seed 002's dynamic memory management.")
#: The idle timeouts are whole seconds, as Lemonade's (it refuses `600.5`).
DOWNSIZE_IDLE_TIMEOUT = Field(
    60,
    ge=0,
    description="Seconds idle before a model frees its KV cache and compute buffers.",
    json_schema_extra=unit("s"),
)
EVICT_IDLE_TIMEOUT = Field(
    300,
    ge=0,
    description="Seconds idle before a model is unloaded.",
    json_schema_extra=unit("s"),
)
EVICT_WEIGHT_FACTOR = Field(
    1.0,
    gt=0,
    description="Eviction protection: higher keeps a model longer under memory pressure.",
)
COMPUTE_WEIGHT = Field(
    1.0,
    gt=0,
    le=1000,
    description="Share of the cores against other busy models (issue 21's compute plan): "
    "two busy models with weights 3 and 1 get three quarters and one quarter.",
)
WORKERS = Field(
    0,
    ge=0,
    le=64,
    description="Engine workers (llama.cpp contexts) per llama.cpp backend; 0: automatic "
    "(two for a small or GPU-offloaded text model on two or more cores, else one).",
)
PARALLEL = Field(8, ge=1, le=256, description="Sequences per engine worker.")
THREADS = Field(
    0,
    ge=0,
    le=512,
    description="CPU threads per engine worker (0: all cores).",
    json_schema_extra=unit("threads"),
)
