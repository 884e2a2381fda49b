"""Lemonade-compatible management routes: health, stats, load, unload, pull, delete,
plus /internal/* (pin, set, config) guarded by the admin key."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from fastapi import APIRouter, Request

from juggler import __version__
from juggler.config import ConfigError, parse_max_loaded_models, set_value
from juggler.errors import BadRequest, CheckpointMissing
from juggler.manager.memory import process_rss
from juggler.registry.checkpoint import HfRef, LocalRef, parse_checkpoint
from juggler.registry.download import download
from juggler.router.bodies import parse
from juggler.router.deps import state_of
from juggler.router.openapi import body_of
from juggler.router.schemas import (
    DeleteRequest,
    LoadRequest,
    PinRequest,
    PullRequest,
    SetRequest,
    UnloadRequest,
    load_overrides,
)
from juggler.router.security import check_registration

router = APIRouter()
internal = APIRouter()


def is_admin(request: Request) -> bool:
    """Whether the request carried the admin key (AuthMiddleware decided it)."""
    return bool(getattr(request.state, "is_admin", False))


_EMPTY_STATS: dict[str, Any] = {
    "time_to_first_token": None,
    "tokens_per_second": None,
    "input_tokens": None,
    "output_tokens": None,
    "decode_token_times": None,
    "prompt_tokens": None,
}


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    manager = state_of(request).manager
    recent = manager.most_recent()
    return {
        "status": "ok",
        "version": __version__,
        "model_loaded": recent.model_name if recent else None,
        "checkpoint_loaded": recent.checkpoint if recent else None,
        "all_models_loaded": [with_memory(s.to_health()) for s in manager.snapshot()],
        "max_models": manager.max_models(),
        "watchdog": manager.restarts(),
        "memory": memory.to_health() if (memory := manager.memory_status()) else None,
    }


def with_memory(entry: dict[str, Any]) -> dict[str, Any]:
    """A health entry with the memory its backend holds now (resident, from /proc)."""
    pid = entry.get("pid")
    entry["memory"] = {
        "rss_bytes": process_rss(pid) if isinstance(pid, int) else None,
        "downsizable_bytes": entry.get("downsizable_bytes", 0),
    }
    return entry


@router.get("/stats")
async def stats(request: Request) -> dict[str, Any]:
    """The most recent inference request's figures, read from the backend that served it."""
    state = state_of(request)
    if state.proxy.last_served is None:
        return dict(_EMPTY_STATS)
    model, url = state.proxy.last_served
    try:
        data: dict[str, Any] = await state.proxy.get_json(url + "/stats")
    except httpx.HTTPError:
        return {**_EMPTY_STATS, "model": model, "error": "backend no longer available"}
    return {**data, "model": model}


@router.post("/load", openapi_extra=body_of(LoadRequest))
async def load(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body: Any
    body, _ = await parse(request, LoadRequest)
    if body.checkpoint and body.model_name.startswith("user."):
        check_registration(
            state.settings,
            is_admin=is_admin(request),
            recipe=body.recipe or "llamacpp",
            checkpoint=body.checkpoint,
            command=None,
        )
        state.registry.add_user_model(
            body.model_name, checkpoint=body.checkpoint, recipe=body.recipe or "llamacpp"
        )
    state.registry.get(body.model_name)  # 404 model_not_found before anything queues
    snapshot = await state.manager.load(body.model_name, load_overrides(body), pinned=body.pinned)
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


@router.post("/pull", openapi_extra=body_of(PullRequest))
async def pull(request: Request) -> dict[str, Any]:
    """Register a user model (`user.NAME`). A local checkpoint must exist; a Hugging Face
    checkpoint is downloaded into the cache first."""
    state = state_of(request)
    body, _ = await parse(request, PullRequest)
    check_registration(
        state.settings,
        is_admin=is_admin(request),
        recipe=body.recipe,
        checkpoint=body.checkpoint,
        command=body.command,
    )
    labels = list(body.labels)
    for flag in ("reasoning", "vision", "embedding", "reranking"):
        if getattr(body, flag) and flag not in labels:
            labels.append(flag)
    if body.checkpoint:
        try:
            ref = parse_checkpoint(body.checkpoint)
        except ValueError as exc:
            raise BadRequest(str(exc), param="checkpoint") from None
        if isinstance(ref, LocalRef) and not ref.path.is_file():
            raise CheckpointMissing(f"model file not found: {ref.path}", param="checkpoint")
        if isinstance(ref, HfRef):
            await asyncio.to_thread(download, ref)
    info = state.registry.add_user_model(
        body.model_name,
        checkpoint=body.checkpoint,
        recipe=body.recipe,
        labels=tuple(labels),
        command=body.command,
        health_path=body.health_path,
        device=body.device,
    )
    return {"status": "success", "message": f"Installed model: {info.name}"}


@router.post("/delete", openapi_extra=body_of(DeleteRequest))
async def delete(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, DeleteRequest)
    state.registry.get(body.model_name)
    if any(s.model_name == body.model_name for s in state.manager.snapshot()):
        await state.manager.unload(body.model_name)
    state.registry.remove_user_model(body.model_name)
    return {"status": "success", "message": f"Deleted model: {body.model_name}"}


@internal.post("/internal/pin", openapi_extra=body_of(PinRequest))
async def pin(request: Request) -> dict[str, Any]:
    body, _ = await parse(request, PinRequest)
    state = state_of(request)
    snapshot = await state.manager.pin(body.model_name, body.pinned)
    state.pins.record(snapshot)
    return {"status": "success", "model_name": body.model_name, "pinned": snapshot.pinned}


@internal.post("/internal/set", openapi_extra=body_of(SetRequest))
async def set_config(request: Request) -> dict[str, Any]:
    body, _ = await parse(request, SetRequest)
    updated: dict[str, Any] = {}
    if body.max_loaded_models is not None:
        try:
            limits = parse_max_loaded_models(body.max_loaded_models)
        except ValueError as exc:
            raise BadRequest(f"max_loaded_models: {exc}", param="max_loaded_models") from None
        await state_of(request).manager.set_max_loaded_models(limits)
        updated["max_loaded_models"] = list(limits)
    if body.auto_evict is not None or body.auto_evict_threshold_pct is not None:
        await state_of(request).manager.set_memory_config(
            auto_evict=body.auto_evict, threshold=body.auto_evict_threshold_pct
        )
        for key in ("auto_evict", "auto_evict_threshold_pct"):
            value = getattr(body, key)
            if value is not None:
                persist(key, value)
                updated[key] = value
    return {"status": "success", "updated": updated}


def persist(key: str, value: Any) -> None:
    """Keep a run-time setting in the config file, so it survives a restart."""
    try:
        set_value(key, json.dumps(value))
    except (ConfigError, OSError) as exc:
        raise BadRequest(f"{key}: could not be saved: {exc}", param=key) from None


@internal.get("/internal/config")
async def get_config(request: Request) -> dict[str, Any]:
    state = state_of(request)
    values = state.settings.model_dump(mode="json", exclude={"api_key", "admin_api_key"})
    values["max_loaded_models"] = list(state.manager.max_models().values())
    values["max_models"] = state.manager.max_models()
    return values
