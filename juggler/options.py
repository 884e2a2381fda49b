"""The options of a served model and their priority order; the engine's flags and every
option's declaration are re-exported here, so `juggler.options` still names them all.

What this module owns:

- `ModelOptions`: the per-model options of Lemonade's `/api/v1/load` (`ctx_size`,
  `llamacpp_backend`, `llamacpp_args`, `merge_args`) and seed 002's eviction settings.
  `Settings` (config.py) declares the same fields as server-wide defaults;
  `LoadOverrides` is the all-optional form a `/load` body carries. Seed 000's priority
  order is `resolve(settings, overrides, saved)`: "1. Values explicity passed in `load`
  [...] 2. Values set by the user as [...] CLI args or env vars. 3. Default hardcoded
  values", with lemonade.md's saved per-model options between the first two
  (`Settings.model_options` adds the layering and check of `llamacpp_args`).
- `bad_request_from` / `bad_request_of`: a pydantic error as a 400 that names the field.

Declared elsewhere and importable from here: each option's `Field` (default, bounds,
unit, help text) in `juggler.option_fields`, and `EngineFlags`, the command line of
Juggler's llama.cpp backend, in `juggler.engine_flags`.

The environment variable of a setting is `JUGGLER_<NAME>` (see `env_name`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from juggler.engine_flags import EngineFlags, FlashAttn, flag_of
from juggler.errors import BadRequest, NotImplementedParam
from juggler.kv_cache import KvCacheType
from juggler.option_fields import (
    AUTO_CTX,
    AUTO_EVICT,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    COMPUTE_WEIGHT,
    CTX_SIZE,
    DOWNSIZE_IDLE_TIMEOUT,
    ENV_PREFIX,
    EVICT_IDLE_TIMEOUT,
    EVICT_WEIGHT_FACTOR,
    KV_CELLS,
    LLAMACPP_ARGS,
    LLAMACPP_BACKEND,
    MAX_CTX,
    MAX_KV_CELLS,
    MERGE_ARGS,
    MIN_CTX,
    MODEL_CTX_SIZE,
    N_GPU_LAYERS,
    PARALLEL,
    THREADS,
    WORKERS,
    CtxSize,
    LlamacppBackend,
    env_name,
)

#: This module's names, and those declared in `option_fields` and `engine_flags` that
#: callers import from here.
__all__ = [
    "AUTO_CTX",
    "AUTO_EVICT",
    "CACHE_TYPE_K",
    "CACHE_TYPE_V",
    "COMPUTE_WEIGHT",
    "CTX_SIZE",
    "DOWNSIZE_IDLE_TIMEOUT",
    "ENV_PREFIX",
    "EVICT_IDLE_TIMEOUT",
    "EVICT_WEIGHT_FACTOR",
    "KV_CELLS",
    "LAUNCH_OPTIONS",
    "LLAMACPP_ARGS",
    "LLAMACPP_BACKEND",
    "MAX_CTX",
    "MAX_KV_CELLS",
    "MERGE_ARGS",
    "MIN_CTX",
    "MODEL_CTX_SIZE",
    "MODEL_OPTION_KEYS",
    "N_GPU_LAYERS",
    "PARALLEL",
    "PER_MODEL_ONLY",
    "THREADS",
    "UNBUILT_SETTINGS",
    "WORKERS",
    "CtxSize",
    "EngineFlags",
    "FlashAttn",
    "LaunchKey",
    "LlamacppBackend",
    "LoadOverrides",
    "ModelOptions",
    "bad_request_from",
    "bad_request_of",
    "env_name",
    "flag_of",
    "resolve",
]


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
