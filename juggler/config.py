"""One settings object for the router process.

Precedence, highest first: CLI flag > environment (`JUGGLER_*`) > config file
(`config.json` in the config directory; `JUGGLER_HOME` overrides where that is) >
built-in defaults. `load_settings()` applies them in that order and validates the result;
a bad value raises `ConfigError` naming the key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from juggler import options as opt
from juggler.accel.detect import default_backend
from juggler.engine_args import check_kv_cache, layered_llamacpp_args, parse_llamacpp_args
from juggler.errors import JugglerError
from juggler.kv_cache import KvCacheType
from juggler.options import ModelOptions, env_name
from juggler.types import MODEL_TYPE_ORDER, ModelType

DEFAULT_MODEL = "SmolLM2-135M-Instruct-GGUF"


class ConfigError(ValueError):
    """A configuration key or value was refused; the message names the key."""


def juggler_home() -> Path:
    """The config directory: $JUGGLER_HOME, else $XDG_CONFIG_HOME/juggler, else ~/.config/juggler."""
    if home := os.environ.get("JUGGLER_HOME"):
        return Path(home)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "juggler"


def parse_max_loaded_models(value: Any) -> tuple[int, ...]:
    """Accept one integer for every type (seed 001) or up to five (seed 000 extended:
    llm, embedding, reranking, audio, image), padded with the default 1. `-1` is unlimited;
    `0` and values below `-1` are refused."""
    if isinstance(value, str):
        parts: list[Any] = [p for p in value.replace(",", " ").split() if p]
    elif isinstance(value, int):
        parts = [value]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        raise ValueError(f"expected an integer or a list of integers, got {value!r}")
    if not parts or len(parts) > len(MODEL_TYPE_ORDER):
        raise ValueError(f"give 1 to {len(MODEL_TYPE_ORDER)} integers, got {len(parts)}")
    numbers: list[int] = []
    for part in parts:
        try:
            n = int(part)
        except (TypeError, ValueError):
            raise ValueError(f"{part!r} is not an integer") from None
        if isinstance(part, float) and part != n:
            raise ValueError(f"{part!r} is not an integer")
        if n == 0 or n < -1:
            raise ValueError(f"{n} is not allowed; use a positive number, or -1 for unlimited")
        numbers.append(n)
    if len(numbers) == 1:
        return tuple(numbers * len(MODEL_TYPE_ORDER))
    return tuple(numbers + [1] * (len(MODEL_TYPE_ORDER) - len(numbers)))


class Settings(BaseModel):
    """Every setting of the router process. Frozen: change it by building a new one.

    The per-model options (ctx_size ... evict_weight_factor) and the engine shape
    (workers, parallel, threads) reuse the declarations in `juggler.options`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(13305, ge=0, le=65535)
    #: The model `juggler serve` loads at start ("" = load nothing until asked).
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    admin_api_key: str | None = None
    #: Request bodies larger than this get 413.
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    #: Issue 51: whether images given by http(s) URL are fetched (off: only data URLs),
    #: the most bytes one may have, and how long its fetch may take.
    image_url_fetch: bool = False
    image_url_max_bytes: int = Field(20 * 1024 * 1024, ge=1024, le=1 << 30)
    image_url_timeout_s: float = Field(10.0, gt=0, le=600)
    #: A file upload (Ollama's blobs) larger than this gets 413.
    max_upload_bytes: int = Field(64 * 1024**3, ge=1024)
    #: Whether the `command` recipe (a model served by a command line) may run at all.
    #: Only the config file or the environment can turn it on, never an HTTP request.
    allow_command_recipes: bool = False
    #: Directories (besides Juggler's own model cache) whose files clients may register
    #: as checkpoints without the admin key (Lemonade's extra_models_dir).
    model_dirs: tuple[str, ...] = ()
    #: Browser origins allowed by CORS; empty: CORS is off (the server's own origin, the
    #: dashboard, is always allowed).
    cors_origins: tuple[str, ...] = ()
    #: Host header values besides the server's own names and addresses (a guard against
    #: DNS rebinding): `name`, `*.domain`, or `*` for any.
    allowed_hosts: tuple[str, ...] = ()
    #: Seconds a client has to send a request's headers (nginx's client_header_timeout).
    header_timeout_s: float = Field(60.0, gt=0, le=3600)
    #: Open connections (and requests in progress) at most; more get 503.
    max_connections: int = Field(4096, ge=16, le=1_000_000)
    #: Most inputs of one embeddings request, documents of one rerank, prompts of one
    #: completion (OpenAI's embeddings limit by default); more get 400.
    max_inputs: int = Field(2048, ge=1, le=1_000_000)
    #: Most messages of one chat request; more get 400.
    max_messages: int = Field(8192, ge=1, le=1_000_000)
    #: Open sessions (`/api/v1/sessions`) the router keeps; more get 429.
    max_sessions: int = Field(4096, ge=1, le=1_000_000)
    #: Requests that may wait in the router for their model to load; more get 429.
    max_queued_requests: int = Field(256, ge=1, le=100000)
    #: How long a request may wait for its model to load before it gets 429.
    queue_timeout_s: float = Field(300.0, gt=0)
    #: Issue 49: an SSE comment (`: ping`) after this many seconds without a word from
    #: the backend (a long prompt's prefill), so that proxies and clients wait; 0: none.
    sse_ping_interval_s: float = Field(5.0, ge=0, le=3600)
    #: On SIGTERM, how long streams may go on before they are ended with an error event.
    drain_timeout: float = Field(30.0, ge=0, le=3600)
    #: Slots per type, in MODEL_TYPE_ORDER; -1 = unlimited.
    max_loaded_models: tuple[int, ...] = (1, 1, 1, 1, 1)
    #: Engine shape for llamacpp backends.
    workers: int = opt.WORKERS
    parallel: int = opt.PARALLEL
    threads: int = opt.THREADS
    #: Seconds a backend may take to become healthy.
    load_timeout_s: float = Field(120.0, gt=0)
    log_level: str = "info"
    #: Per-model defaults (a /load body overrides them; seed 000's priority order).
    ctx_size: opt.CtxSize = opt.MODEL_CTX_SIZE
    kv_cells: int = opt.KV_CELLS
    #: The default follows what `make install` built for this machine (`accel.detect`).
    llamacpp_backend: opt.LlamacppBackend = Field(
        default_factory=default_backend,  # type: ignore[arg-type]
        description=opt.LLAMACPP_BACKEND.description,
    )
    n_gpu_layers: int = opt.N_GPU_LAYERS
    llamacpp_args: str = opt.LLAMACPP_ARGS
    merge_args: bool = opt.MERGE_ARGS
    cache_type_k: KvCacheType = opt.CACHE_TYPE_K
    cache_type_v: KvCacheType = opt.CACHE_TYPE_V
    auto_evict: bool = opt.AUTO_EVICT
    downsize_idle_timeout: int = opt.DOWNSIZE_IDLE_TIMEOUT
    evict_idle_timeout: int = opt.EVICT_IDLE_TIMEOUT
    evict_weight_factor: float = opt.EVICT_WEIGHT_FACTOR
    compute_weight: float = opt.COMPUTE_WEIGHT
    #: Issue 21: divide the cores between busy backends (off: every backend uses every
    #: core, as llama.cpp's own server does).
    compute_plan: bool = True
    #: Seed 002: global memory use (0..1) above which idle models are evicted.
    auto_evict_threshold_pct: float = Field(0.90, gt=0, le=1)

    @field_validator("max_loaded_models", mode="before")
    @classmethod
    def _max_loaded(cls, value: Any) -> tuple[int, ...]:
        return parse_max_loaded_models(value)

    @field_validator("model_dirs", "cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _string_list(cls, value: Any) -> Any:
        """A list, or (from the environment or `config set`) one comma-separated string."""
        if isinstance(value, str):
            return tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("llamacpp_args")
    @classmethod
    def _llamacpp_args(cls, value: str) -> str:
        try:
            parse_llamacpp_args(value)
        except JugglerError as exc:
            raise ValueError(exc.message.removeprefix("llamacpp_args: ")) from None
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        allowed = {"critical", "error", "warning", "info", "debug", "trace"}
        if value.lower() not in allowed:
            raise ValueError(f"{value!r} is not one of {sorted(allowed)}")
        return value.lower()

    @model_validator(mode="after")
    def _kv_cache(self) -> Settings:
        try:
            check_kv_cache(self.cache_type_v, self.llamacpp_args)
        except JugglerError as exc:
            raise ValueError(exc.message) from None
        return self

    @model_validator(mode="after")
    def _unbuilt(self) -> Settings:
        for key in opt.UNBUILT_SETTINGS:
            if getattr(self, key) != type(self).model_fields[key].default:
                raise ValueError(f"{key}: {opt.UNBUILT_SETTINGS[key]}")
        return self

    def max_models_for(self, model_type: ModelType) -> int:
        """Slots for one type; -1 = unlimited."""
        return self.max_loaded_models[MODEL_TYPE_ORDER.index(model_type)]

    def model_options(
        self,
        overrides: BaseModel | dict[str, Any] | None = None,
        *,
        saved: Mapping[str, Any] | None = None,
    ) -> ModelOptions:
        """A model's options: a /load body's values (`overrides`) over the model's saved
        options (`saved`) over this server's defaults. `llamacpp_args` is layered as
        lemonade.md's `merge_args` says (`engine_args.layered_llamacpp_args`); a bad
        engine flag is a BadRequest naming `llamacpp_args`."""
        options = opt.resolve(self, overrides, saved)
        given = overrides.model_dump() if isinstance(overrides, BaseModel) else overrides or {}
        args = layered_llamacpp_args(
            self.llamacpp_args,
            (saved or {}).get("llamacpp_args"),
            given.get("llamacpp_args"),
            merge=options.merge_args,
        )
        check_kv_cache(options.cache_type_v, args)
        if args == options.llamacpp_args:
            return options
        try:
            return ModelOptions.model_validate({**options.model_dump(), "llamacpp_args": args})
        except ValidationError as exc:
            raise opt.bad_request_from(exc) from None


KEYS: tuple[str, ...] = tuple(Settings.model_fields)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "settings"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{key}: {msg}"


def validate(values: Mapping[str, Any]) -> Settings:
    """Build Settings from a mapping; unknown keys and bad values raise ConfigError."""
    for key in values:
        if key not in KEYS:
            raise ConfigError(f"unknown setting {key!r}; known settings: {', '.join(KEYS)}")
    try:
        return Settings(**dict(values))
    except ValidationError as exc:
        raise ConfigError(_first_error(exc)) from None


def config_path() -> Path:
    return juggler_home() / "config.json"


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """The config file's values ({} when absent); a broken file raises ConfigError."""
    path = path or config_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def read_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`JUGGLER_<KEY>` variables for known keys (JUGGLER_HOME is a location, not a key)."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for key in KEYS:
        name = env_name(key)
        if name in environ:
            out[key] = environ[name]
    return out


def load_settings(
    cli: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    file: Path | None = None,
) -> Settings:
    """Merge defaults < config file < environment < CLI flags (None values are ignored)."""
    merged: dict[str, Any] = {}
    merged.update(read_config_file(file))
    merged.update(read_env(environ))
    merged.update({k: v for k, v in (cli or {}).items() if v is not None})
    return validate(merged)


def coerce_value(key: str, raw: str) -> Any:
    """Turn `config set key=value` text into the field's value (JSON where it parses)."""
    if key not in KEYS:
        raise ConfigError(f"unknown setting {key!r}; known settings: {', '.join(KEYS)}")
    if key == "max_loaded_models":
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def set_value(key: str, raw: str, path: Path | None = None) -> Settings:
    """Persist one key to the config file after validating the whole result."""
    path = path or config_path()
    data = read_config_file(path)
    data[key] = coerce_value(key, raw)
    settings = validate(data)
    stored = settings.model_dump(mode="json")[key]
    data[key] = list(stored) if isinstance(stored, tuple) else stored
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return settings
