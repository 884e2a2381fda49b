"""LoRA adapters on the router side (seed 004): registering, routing, in-flight counts.

A client names an adapter as its request's `model`. `Adapters.route` turns that into
the base model plus the adapter (its id and file) for the backend, which loads it on
first use (so a reloaded backend serves it again without being told). Requests running
with an adapter are counted, so that unregistering one in use is refused with 409
instead of cutting them off. Owned by the router's event loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from juggler.api.openai import ADAPTER_FIELD
from juggler.config import Settings
from juggler.errors import BadRequest, Conflict, NotFound
from juggler.manager.manager import Manager
from juggler.manager.snapshot import ServerState
from juggler.registry.adapters import (
    AdapterBook,
    AdapterInfo,
    check_adapter,
    check_id,
    model_adapter_id,
)
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import LocalRef, parse_checkpoint, resolve_checkpoint
from juggler.router.core.security import check_registration
from juggler.types import ModelType

log = logging.getLogger("juggler.router")


@dataclass(frozen=True)
class Target:
    """Where a request goes: the model to acquire and the adapter it runs with."""

    model: str
    adapter: AdapterInfo | None = None


class Adapters:
    def __init__(self, settings: Settings, registry: Registry, book: AdapterBook) -> None:
        self.settings = settings
        self.registry = registry
        self.book = book
        self._in_flight: collections.Counter[str] = collections.Counter()

    # -- requests ----------------------------------------------------------------------
    def route(self, model: str, body: dict[str, Any]) -> Target:
        """The target of a request for `model`; for an adapter, `body` gains the adapter
        field for the backend (clients may not set it: `bodies.read_json`). A model made by
        Ollama's create with an ADAPTER runs with it (`core/modelfiles`)."""
        found = self.registry.find(model)
        info = self.book.get(model) if found is None else self._own_adapter(found.name)
        if info is None:
            return Target(model)
        body[ADAPTER_FIELD] = {"id": info.adapter_id, "path": info.path}
        return Target(info.base_model, info)

    def _own_adapter(self, model: str) -> AdapterInfo | None:
        """The ADAPTER of a model made by Ollama's create, registered for it."""
        info = self.book.get(model_adapter_id(model))
        return info if info is not None and info.base_model == model else None

    def hold(self, target: Target) -> Callable[[], None]:
        """Count one request running with the target's adapter; returns its (idempotent)
        end."""
        return self.hold_id(target.adapter.adapter_id if target.adapter else None)

    def hold_id(self, adapter_id: str | None) -> Callable[[], None]:
        if adapter_id is None:
            return lambda: None
        self._in_flight[adapter_id] += 1
        done = False

        def end() -> None:
            nonlocal done
            if not done:
                done = True
                self._in_flight[adapter_id] -= 1

        return end

    def in_flight(self, adapter_id: str) -> int:
        return self._in_flight[adapter_id]

    # -- registration ------------------------------------------------------------------
    async def register(
        self, adapter_id: str, path: str, base_model: str | None, *, is_admin: bool
    ) -> AdapterInfo:
        """Validate and register an adapter; an id already registered with the same file
        and base is a no-op, with another one a 409."""
        check_id(adapter_id)
        base = base_model or self.settings.model
        if not base:
            raise BadRequest("base_model is required (no default model is set)", param="base_model")
        if self.registry.find(adapter_id) is not None:
            raise Conflict(f"{adapter_id!r} is a model's name", param="adapter_id")
        check_registration(
            self.settings, is_admin=is_admin, recipe="llamacpp", checkpoint=path, command=None
        )
        try:
            ref = parse_checkpoint(path)
        except ValueError as exc:
            raise BadRequest(f"path: {exc}", param="path") from None
        if not isinstance(ref, LocalRef):
            raise BadRequest(
                "path must be an absolute path to a local LoRA GGUF (a hub reference is "
                "never opened as a file)",
                param="path",
            )
        file = ref.path
        if not file.is_file():
            raise BadRequest(f"LoRA adapter file not found: {file}", param="path")
        info = self.registry.get(base)  # 404 model_not_found
        if info.type is not ModelType.LLM or info.recipe != "llamacpp":
            raise BadRequest(
                f"LoRA adapters need a llama.cpp LLM as base model; {base!r} is a "
                f"{info.type.value} model ({info.recipe})",
                param="base_model",
            )
        base_file = await asyncio.to_thread(resolve_checkpoint, info)
        await asyncio.to_thread(check_adapter, file, base_file)
        adapter = AdapterInfo(adapter_id, str(file.resolve()), base)
        existing = self.book.get(adapter_id)
        if existing is not None and existing != adapter:
            raise Conflict(
                f"LoRA adapter {adapter_id!r} is registered with {existing.path} for "
                f"{existing.base_model}; unregister it first",
                param="adapter_id",
            )
        self.book.add(adapter)
        return adapter

    async def unregister(
        self, adapter_id: str, manager: Manager, client: httpx.AsyncClient
    ) -> None:
        """Forget an adapter and unload it from its base model's backends; refused (409)
        while requests run with it."""
        if self.book.get(adapter_id) is None:
            raise NotFound(f"LoRA adapter {adapter_id!r} is not registered", param="adapter_id")
        running = self.in_flight(adapter_id)
        if running:
            raise Conflict(
                f"LoRA adapter {adapter_id!r} is in use by {running} running request(s); "
                "unregister it when they are done",
                param="adapter_id",
            )
        info = self.book.remove(adapter_id)  # no await since the check: nothing new started
        for snap in manager.snapshot():
            if snap.model_name != info.base_model or snap.status is not ServerState.READY:
                continue
            try:
                await client.delete(f"{snap.backend_url}/internal/adapters/{adapter_id}")
            except httpx.HTTPError as exc:  # a backend that went away holds nothing
                log.info("unloading adapter %s from %s: %s", adapter_id, snap.backend_url, exc)

    async def active(self, manager: Manager, client: httpx.AsyncClient) -> list[str]:
        """Adapters loaded in some backend now (asked of each ready llama.cpp backend)."""
        urls = [
            s.backend_url
            for s in manager.snapshot()
            if s.status is ServerState.READY and s.recipe == "llamacpp"
        ]

        async def loaded(url: str) -> list[str]:
            try:
                data = (await client.get(url + "/stats", timeout=2.0)).json()
            except (httpx.HTTPError, ValueError):
                return []
            lora = data.get("lora") if isinstance(data, dict) else None
            return [str(a) for a in (lora or {}).get("loaded", ())]

        found = await asyncio.gather(*(loaded(u) for u in urls))
        return sorted({a for names in found for a in names})
