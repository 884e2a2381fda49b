"""Every option that shapes a served model, declared once.

Each option is one pydantic `Field` below, with its default, bounds, unit and help text.
The models that use them:

- `ModelOptions`: the per-model options of Lemonade's `/api/v1/load` (`ctx_size`,
  `llamacpp_backend`, `llamacpp_args`, `merge_args`) and seed 002's eviction settings.
  `Settings` (config.py) declares the same fields as server-wide defaults;
  `LoadOverrides` is the all-optional form a `/load` body carries. Seed 000's priority
  order is `resolve(settings, overrides, saved)`: "1. Values explicity passed in `load`
  [...] 2. Values set by the user as [...] CLI args or env vars. 3. Default hardcoded
  values", with lemonade.md's saved per-model options between the first two
  (`Settings.model_options` adds the layering and check of `llamacpp_args`).
- `EngineFlags`: the command line of Juggler's llama.cpp backend (`python -m
  juggler.engine`). The backend builds its argparse from these fields, the manager's
  recipe writes argv with `to_argv()`, and a client's `llamacpp_args` is parsed
  against them (`engine_args.parse_llamacpp_args`) before anything is queued or
  evicted, so a bad flag is a 400 that names it.

The environment variable of a setting is `JUGGLER_<NAME>` (see `env_name`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from juggler.errors import BadRequest, NotImplementedParam
from juggler.kv_cache import DEFAULT_KV_TYPE, KvCacheType

ENV_PREFIX = "JUGGLER_"

LlamacppBackend = Literal["cpu", "vulkan", "rocm", "metal", "cuda"]
FlashAttn = Literal["auto", "on", "off"]


def env_name(key: str) -> str:
    """The environment variable of setting `key`, e.g. ctx_size -> JUGGLER_CTX_SIZE."""
    return ENV_PREFIX + key.upper()


def _unit(unit: str) -> dict[str, Any]:
    return {"unit": unit}


# -- the declarations --------------------------------------------------------------------
MIN_CTX, MAX_CTX = 64, 1 << 20
#: Lemonade's `ctx_size: -1`: the size is chosen at load (`manager.auto_ctx`).
AUTO_CTX = -1

CTX_SIZE = Field(
    4096,
    ge=MIN_CTX,
    le=MAX_CTX,
    description="Context size: tokens one sequence may hold (at most the model's trained "
    "context); also a worker's KV cells unless kv_cells says more.",
    json_schema_extra=_unit("tokens"),
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
    json_schema_extra=_unit("cells"),
)
N_GPU_LAYERS: Any = Field(
    -1,
    ge=-1,
    le=100000,
    description="Layers offloaded to the GPU (llama-server's -ngl, Ollama's num_gpu): -1 "
    "automatic (as many as fit in the free VRAM with their KV cache), 0 none; a GPU "
    "llamacpp_backend only.",
    json_schema_extra=_unit("layers"),
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
    json_schema_extra=_unit("s"),
)
EVICT_IDLE_TIMEOUT = Field(
    300,
    ge=0,
    description="Seconds idle before a model is unloaded.",
    json_schema_extra=_unit("s"),
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
    json_schema_extra=_unit("threads"),
)


#: `ModelOptions.launch_key`: ctx_size, llamacpp_backend, llamacpp_args, kv_cells,
#: n_gpu_layers, cache types.
LaunchKey = tuple[int, str, str, int, int, str, str]


class ModelOptions(BaseModel):
    """The complete per-model options of one WrappedServer (after the priority merge)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ctx_size: CtxSize = MODEL_CTX_SIZE
    kv_cells: int = KV_CELLS
    llamacpp_backend: LlamacppBackend = LLAMACPP_BACKEND
    n_gpu_layers: int = N_GPU_LAYERS
    llamacpp_args: str = LLAMACPP_ARGS
    merge_args: bool = MERGE_ARGS
    cache_type_k: KvCacheType = CACHE_TYPE_K
    cache_type_v: KvCacheType = CACHE_TYPE_V
    auto_evict: bool = AUTO_EVICT
    downsize_idle_timeout: int = DOWNSIZE_IDLE_TIMEOUT
    evict_idle_timeout: int = EVICT_IDLE_TIMEOUT
    evict_weight_factor: float = EVICT_WEIGHT_FACTOR
    compute_weight: float = COMPUTE_WEIGHT

    def launch_key(self) -> LaunchKey:
        """The options that change how the backend process is started. Two loads of one
        model with the same key are the same load (no-op); a different key reloads."""
        return (
            self.ctx_size,
            self.llamacpp_backend,
            self.llamacpp_args,
            self.kv_cells,
            self.n_gpu_layers,
            self.cache_type_k,
            self.cache_type_v,
        )

    def recipe_options(self) -> dict[str, Any]:
        """Lemonade's `recipe_options` object for health entries: the options that launch
        the backend (`ctx_size`, `llamacpp_backend`, `llamacpp_args`, as lemonade.md's
        example), and each other option only when it is not its default (Lemonade shows
        the options some layer set, never a default eviction setting: its suite checks
        that `auto_evict` and `evict_idle_timeout` stay out after an auto-load)."""
        values = self.model_dump()
        return {k: v for k, v in values.items() if k in LAUNCH_OPTIONS or v != _DEFAULTS.get(k)}


#: The options health's `recipe_options` always shows: they shape the backend's launch.
LAUNCH_OPTIONS = frozenset({"ctx_size", "llamacpp_backend", "llamacpp_args"})
_DEFAULTS: dict[str, Any] = ModelOptions().model_dump()


def _optional(info: FieldInfo) -> tuple[Any, Any]:
    """The all-optional form of a field: same type and bounds, default None."""
    inner: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return (inner | None, Field(None, description=info.description))


#: A /load body's options: every `ModelOptions` field, optional (None = not given).
LoadOverrides: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "LoadOverrides",
    __config__=ConfigDict(frozen=True, extra="forbid"),
    **{name: _optional(info) for name, info in ModelOptions.model_fields.items()},
)

#: Settings that are per-model options, in declaration order.
MODEL_OPTION_KEYS: tuple[str, ...] = tuple(ModelOptions.model_fields)

#: Per-model options whose server-wide setting is not a default but a live switch of its
#: own: a model's `auto_evict` says that this model opted in; the global `auto_evict`
#: (Settings, changed at run time by /internal/set) opts every model in.
PER_MODEL_ONLY = frozenset({"auto_evict"})

#: Options declared but not built yet, with why: a value other than the default is
#: refused (400 on /load, an error in the config) instead of being accepted and ignored.
UNBUILT_SETTINGS: dict[str, str] = {}


def resolve(
    defaults: BaseModel,
    overrides: BaseModel | dict[str, Any] | None,
    saved: Mapping[str, Any] | None = None,
) -> ModelOptions:
    """Seed 000's priority order, as lemonade.md's: `overrides` (a /load body) > `saved`
    (the model's saved options) > `defaults` (Settings: CLI > env > config file >
    built-in); None values are not given. Raises BadRequest naming a bad field.
    `llamacpp_args` is the highest layer's text here: `Settings.model_options` layers it
    over the server-wide flags (`merge_args`) and parses it against `EngineFlags`
    (`engine_args`, which builds on this module)."""
    given = overrides.model_dump() if isinstance(overrides, BaseModel) else dict(overrides or {})
    merged = {k: getattr(defaults, k) for k in MODEL_OPTION_KEYS if k not in PER_MODEL_ONLY}
    for layer in (dict(saved or {}), given):
        for key, value in layer.items():
            if value is not None and key in UNBUILT_SETTINGS:
                raise NotImplementedParam(key, UNBUILT_SETTINGS[key])
        merged.update({k: v for k, v in layer.items() if v is not None})
    try:
        options = ModelOptions.model_validate(merged)
    except ValidationError as exc:
        raise bad_request_from(exc) from None
    return options


def bad_request_from(exc: ValidationError) -> BadRequest:
    """A pydantic error as a 400 that names the field."""
    return bad_request_of(exc.errors()[0])


def bad_request_of(err: Mapping[str, Any], skip: tuple[str, ...] = ()) -> BadRequest:
    """One pydantic error (a dict of `errors()`) as a 400 naming the field; a field the
    model does not declare is `unsupported_parameter` (never accepted and ignored).
    `skip`: location parts to leave out (FastAPI's "body")."""
    loc = [str(p) for p in err.get("loc", ()) if str(p) not in skip]
    param = ".".join(loc) or None
    if err.get("type") == "extra_forbidden":
        error = BadRequest(
            f"{param}: unknown or unsupported parameter; Juggler does not implement it",
            param=param,
        )
        error.code = "unsupported_parameter"
        return error
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    return BadRequest(f"{param}: {msg}" if param else msg, param=param)


# -- the engine's command line -------------------------------------------------------------
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
        json_schema_extra=_unit("threads"),
    )
    kv_cells: int = Field(
        0,
        ge=0,
        le=MAX_KV_CELLS,
        description="KV cells of each worker's context, shared by its sequences (0: ctx-size).",
        json_schema_extra=_unit("cells"),
    )
    n_gpu_layers: int = Field(
        0, ge=0, le=100000, description="Layers offloaded to the GPU (0: CPU only)."
    )
    batch_size: int = Field(
        512,
        ge=1,
        le=65536,
        description="Most tokens in one decode.",
        json_schema_extra=_unit("tokens"),
    )
    prefill_chunk: int = Field(
        256,
        ge=1,
        le=65536,
        description="Most prompt tokens a tick prefills while others decode.",
        json_schema_extra=_unit("tokens"),
    )
    stream_queue_size: int = Field(
        256,
        ge=1,
        le=1 << 20,
        description="Unconsumed events after which a slow stream is ended.",
        json_schema_extra=_unit("events"),
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
        json_schema_extra=_unit("cells"),
    )
    parked_cells: int | None = Field(
        None,
        ge=0,
        description="Tokens of cached prefixes an idle worker parks in host memory for later "
        "reuse (default: ctx-size; 0 turns parking off).",
        json_schema_extra=_unit("tokens"),
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
        json_schema_extra=_unit("tokens"),
    )
    max_active_adapters: int = Field(
        4,
        ge=1,
        le=64,
        description="LoRA adapters a worker keeps loaded at once (seed 004's MaxActiveAdapter); "
        "a request needing one more waits.",
        json_schema_extra=_unit("adapters"),
    )
    stall_timeout: float = Field(
        120.0,
        gt=0,
        le=86400,
        description="Seconds a worker may hold work without finishing a step before the "
        "backend reports itself stalled (its /health answers 503 and the router restarts it).",
        json_schema_extra=_unit("s"),
    )
    park_memory_mb: int = Field(
        1024,
        ge=0,
        le=1 << 20,
        description="Parked sessions' KV a worker keeps in host memory; past it, on disk.",
        json_schema_extra=_unit("MiB"),
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
