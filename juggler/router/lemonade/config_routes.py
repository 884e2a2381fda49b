"""Run-time configuration as Lemonade's CLI drives it: `GET /internal/config` shows the
settings in force, `POST /internal/set {"key": value, ...}` changes them (what
`lemonade config set key=value` and `juggler config set` send; Lemonade's nested form
`{"llamacpp": {"backend": "cpu"}}` is `llamacpp.backend`).

Every key is validated as the config file is (an unknown key or a bad value is a 400
naming it), kept in the config file so it survives a restart, and applied as far as a
running server can:
- at once: `max_loaded_models`, `auto_evict`, `auto_evict_threshold_pct`,
  `max_queued_requests`, `queue_timeout_s`, `log_level`, `model_dirs`,
  `max_upload_bytes`, `max_inputs`, `max_messages`, `sse_ping_interval_s` (streams
  relayed from then on);
- at the next load of a model: the per-model defaults and the engine shape;
- after a restart: the rest (`host`, `port`, ...), listed in `restart_required`.
Keys that widen what clients may do (`allow_command_recipes`) or that are secrets
(`api_key`, `admin_api_key`) are never set over HTTP (403): the config file or the
environment only. Like every /internal/* route it needs the admin key when one is set.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from juggler.api.limits import configure_limits
from juggler.config import KEYS, ConfigError, Settings, set_value, validate
from juggler.errors import BadRequest, Forbidden
from juggler.options import LlamacppBackend
from juggler.router.core.bodies import read_json
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.openapi import body_of

internal = APIRouter()

#: Never over HTTP: the config file or the environment only.
FILE_ONLY = frozenset({"allow_command_recipes", "api_key", "admin_api_key"})
#: Lemonade's config.json names for Juggler's keys.
ALIASES = {
    "llamacpp.backend": "llamacpp_backend",
    "llamacpp.args": "llamacpp_args",
    "extra_models_dir": "model_dirs",
}
NOW = frozenset(
    {
        "max_loaded_models",
        "auto_evict",
        "auto_evict_threshold_pct",
        "max_queued_requests",
        "queue_timeout_s",
        "log_level",
        "model_dirs",
        "max_upload_bytes",
        "max_inputs",
        "max_messages",
        "sse_ping_interval_s",
    }
)
NEXT_LOAD = frozenset(
    {
        "ctx_size",
        "llamacpp_backend",
        "llamacpp_args",
        "workers",
        "parallel",
        "threads",
        "downsize_idle_timeout",
        "evict_idle_timeout",
        "evict_weight_factor",
        "compute_weight",
        "merge_args",
        "cache_type_k",
        "cache_type_v",
    }
)


def _optional(info: FieldInfo) -> tuple[Any, Any]:
    """A setting's type and bounds, optional (the document drops the null default)."""
    inner: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return inner, Field(None, description=info.description)


class LlamacppSection(BaseModel):
    """Lemonade's nested form: `{"llamacpp": {"backend": "cpu", "args": ""}}`."""

    model_config = ConfigDict(extra="forbid")

    backend: LlamacppBackend | None = Field(None, description="llamacpp_backend")
    args: str | None = Field(None, description="llamacpp_args")


#: The body of /internal/set: any setting but the file-only ones (values are checked
#: as the config file's are), and Lemonade's nested `llamacpp` section.
SetRequest: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "SetRequest",
    __config__=ConfigDict(extra="forbid"),
    llamacpp=(LlamacppSection | None, Field(None, description="llamacpp.backend, .args")),
    **{key: _optional(Settings.model_fields[key]) for key in KEYS if key not in FILE_ONLY},
)


def flatten(raw: dict[str, Any]) -> dict[str, Any]:
    """Lemonade's config nests a backend's settings under its name (`{"llamacpp":
    {"backend": "cpu"}}`, as its test tools send them): a nested object becomes dotted
    keys (`llamacpp.backend`), which ALIASES resolves or changes_of refuses. Pure."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(value, dict):
            out[key] = value
        elif not value:
            raise BadRequest(f"{key}: give at least one setting", param=key)
        else:
            out.update({f"{key}.{sub}": v for sub, v in value.items()})
    return out


def changes_of(raw: dict[str, Any]) -> dict[str, Any]:
    """The keys a /internal/set body changes, nested sections flattened and aliases
    resolved; raises 400/403. Pure."""
    out: dict[str, Any] = {}
    for key, value in flatten(raw).items():
        name = ALIASES.get(key, key)
        if name in FILE_ONLY:
            raise Forbidden(f"{name} can only be set in the config file or the environment")
        if name not in KEYS:
            raise BadRequest(f"unknown setting {key!r}; known: {', '.join(KEYS)}", param=key)
        if value is None:
            raise BadRequest(f"{key}: a value is required", param=key)
        out[name] = value
    if not out:
        raise BadRequest('give at least one setting, e.g. {"max_loaded_models": 2}')
    return out


@internal.post("/internal/set", openapi_extra=body_of(SetRequest))
async def set_config(request: Request) -> dict[str, Any]:
    state = state_of(request)
    changes = changes_of(await read_json(request))
    current = state.settings.model_dump()
    try:
        new = validate({**current, **changes})
    except ConfigError as exc:
        raise BadRequest(str(exc), param=str(exc).split(":")[0]) from None
    for key in changes:
        persist(key, new.model_dump(mode="json")[key])
    await apply(state, new, set(changes))
    values = new.model_dump(mode="json")
    return {
        "status": "success",
        "updated": {k: values[k] for k in changes},
        "restart_required": sorted(k for k in changes if k not in NOW | NEXT_LOAD),
    }


async def apply(state: RouterState, new: Settings, keys: set[str]) -> None:
    """Make a running server follow the new settings as far as it can."""
    manager = state.manager
    if "max_loaded_models" in keys:
        await manager.set_max_loaded_models(new.max_loaded_models)
    if keys & {"auto_evict", "auto_evict_threshold_pct"}:
        await manager.set_memory_config(
            auto_evict=new.auto_evict if "auto_evict" in keys else None,
            threshold=new.auto_evict_threshold_pct if "auto_evict_threshold_pct" in keys else None,
        )
    configure_limits(max_inputs=new.max_inputs, max_messages=new.max_messages)
    state.proxy.max_waiting = new.max_queued_requests
    state.proxy.queue_timeout_s = new.queue_timeout_s
    state.proxy.ping_interval_s = new.sse_ping_interval_s
    state.registry.model_dirs = new.model_dirs
    if "log_level" in keys:
        level = "DEBUG" if new.log_level == "trace" else new.log_level.upper()
        logging.getLogger().setLevel(level)
    manager.settings = new  # per-model defaults and engine shape: at the next load
    state.settings = new


def persist(key: str, value: Any) -> None:
    """Keep a run-time setting in the config file, so it survives a restart."""
    if isinstance(value, list):  # the config file's list forms
        raw = " ".join(map(str, value)) if key == "max_loaded_models" else ",".join(value)
    else:
        raw = json.dumps(value)
    try:
        set_value(key, raw)
    except (ConfigError, OSError) as exc:
        raise BadRequest(f"{key}: could not be saved: {exc}", param=key) from None


@internal.get("/internal/config")
async def get_config(request: Request) -> dict[str, Any]:
    state = state_of(request)
    values = state.settings.model_dump(mode="json", exclude={"api_key", "admin_api_key"})
    values["max_loaded_models"] = list(state.manager.max_models().values())
    values["max_models"] = state.manager.max_models()
    return values
