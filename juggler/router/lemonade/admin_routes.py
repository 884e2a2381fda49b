"""Lemonade-compatible residency routes: health, stats, load, unload, plus /internal/pin
guarded by the admin key. (Pull and delete: model_routes; /internal/set and
/internal/config: config_routes.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from fastapi import APIRouter, Request

from juggler import __version__
from juggler.manager.memory import process_rss
from juggler.manager.snapshot import ServerSnapshot
from juggler.manager.vram import shown_bytes
from juggler.router.core.bodies import parse
from juggler.router.core.deps import is_admin, is_local_owner, state_of
from juggler.router.core.figures import lemonade_counters
from juggler.router.core.openapi import body_of
from juggler.router.core.security import check_registration
from juggler.router.lemonade.schemas import (
    LoadRequest,
    PinRequest,
    UnloadRequest,
    load_overrides,
    options_to_save,
    tombstones,
)

router = APIRouter()
internal = APIRouter()

_EMPTY_STATS: dict[str, Any] = {
    "time_to_first_token": None,
    "tokens_per_second": None,
    "input_tokens": None,
    "output_tokens": None,
    "decode_token_times": None,
    "prompt_tokens": None,
    "cache_tokens": None,
    "cached_prompt_tokens": None,
}


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    state = state_of(request)
    manager = state.manager
    recent = manager.most_recent()
    streaming = state.proxy.streaming_models()
    per_pid = await manager.vram.per_pid()
    entries = []
    for snap in manager.snapshot():
        entry = with_memory(snap, per_pid)
        entry["is_streaming"] = snap.model_name in streaming
        entries.append(entry)
    return {
        "status": "ok",
        "version": __version__,
        "model_loaded": recent.model_name if recent else None,
        "checkpoint_loaded": recent.checkpoint if recent else None,
        "all_models_loaded": entries,
        "max_models": manager.max_models(),
        "watchdog": manager.restarts(),
        "memory": memory.to_health() if (memory := manager.memory_status()) else None,
        # Lemonade: "`enabled` - Boolean indicating if telemetry collection is active".
        # Juggler collects no telemetry (nothing is sent anywhere).
        "telemetry": {"enabled": False},
    }


def with_memory(snap: ServerSnapshot, per_pid: Mapping[int, int]) -> dict[str, Any]:
    """A health entry with the memory its backend holds now: resident (from /proc) and
    on the GPU (issue 48: NVML's per-process figure, else llama.cpp's buffers)."""
    entry = snap.to_health()
    pid = snap.pid
    vram, source = shown_bytes(snap.gpu, pid, per_pid)
    entry["memory"] = {
        "rss_bytes": process_rss(pid) if isinstance(pid, int) else None,
        "downsizable_bytes": snap.downsizable_bytes,
        "vram_bytes": vram,
        "vram_source": source if vram else None,
        "downsizable_vram_bytes": snap.gpu.downsizable_vram_bytes,
    }
    return entry


@router.get("/stats")
async def stats(request: Request) -> dict[str, Any]:
    """The most recent inference request's figures, read from the backend that served it,
    and Lemonade's cumulative counters since the server started (`*_total`).
    `cache_tokens` (Lemonade's name) and `cached_prompt_tokens`: prompt tokens that came
    from a cached prefix (not prefilled)."""
    state = state_of(request)
    totals = lemonade_counters(state.figures.totals(await state.figures.figures(max_age_s=0.0)))
    if state.proxy.last_served is None:
        return {**_EMPTY_STATS, **totals}
    model, url = state.proxy.last_served
    try:
        data: dict[str, Any] = await state.proxy.get_json(url + "/stats")
    except httpx.HTTPError:
        return {**_EMPTY_STATS, **totals, "model": model, "error": "backend no longer available"}
    cached = data.get("prompt_tokens_reused")
    return {**data, **totals, "cached_prompt_tokens": cached, "model": model}


@router.post("/load", openapi_extra=body_of(LoadRequest))
async def load(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body: Any
    body, _ = await parse(request, LoadRequest)
    if body.checkpoint and body.model_name.startswith("user."):
        check_registration(
            state.settings,
            is_admin=is_admin(request),
            is_local_owner=is_local_owner(request),
            recipe=body.recipe or "llamacpp",
            checkpoint=body.checkpoint,
            command=None,
        )
        state.registry.add_user_model(
            body.model_name, checkpoint=body.checkpoint, recipe=body.recipe or "llamacpp"
        )
    state.registry.get(body.model_name)  # 404 model_not_found before anything queues
    given = load_overrides(body)
    cleared = tombstones(body)  # explicit nulls: this load skips those saved options
    if body.save_options:
        # Checked first: options that cannot load are not saved.
        state.manager.settings.model_options(given)
    snapshot = await state.manager.load(
        body.model_name, given, pinned=body.pinned, ignore_saved=cleared
    )
    if body.save_options:
        saved = state.pins.saved_options(body.model_name)
        state.pins.save_options(body.model_name, options_to_save(saved, given, cleared))
    if body.pinned is not None:
        state.pins.record(snapshot)
    return {
        "status": "success",
        "message": f"Loaded model: {body.model_name}",
        "model": snapshot.to_health(),
    }


@router.post("/unload", openapi_extra=body_of(UnloadRequest, required=False))
async def unload(request: Request) -> dict[str, Any]:
    state = state_of(request)
    raw = await request.body()
    body = (await parse(request, UnloadRequest))[0] if raw.strip() else UnloadRequest()
    names = await state.manager.unload(body.model_name)
    state.pins.forget(names)
    if body.model_name:
        message = f"Unloaded model: {body.model_name}"
    else:
        message = "Unloaded all models" if names else "No models were loaded"
    return {"status": "success", "message": message, "unloaded": names}


@internal.post("/internal/pin", openapi_extra=body_of(PinRequest))
async def pin(request: Request) -> dict[str, Any]:
    body = PinRequest.parse(await request.body())
    state = state_of(request)
    snapshot = await state.manager.pin(body.model_name, body.pinned)
    state.pins.record(snapshot)
    return {"status": "success", "model_name": body.model_name, "pinned": snapshot.pinned}
