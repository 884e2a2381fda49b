"""LoRA adapter routes: seed 004's `/adapters/*` and vLLM's load/unload endpoints.

    GET    /adapters/info        {"config": {"enabled", "maxActiveAdapters"},
                                  "state": {"activeAdapters": [...]}}   (seed 004)
    GET    /adapters             the registered adapters
    POST   /adapters/{id}        {"path", "base_model"?}                 register
    DELETE /adapters/{id}                                                unregister
    POST   /v1/load_lora_adapter   {"lora_name", "lora_path", "base_model"?}   (vLLM)
    POST   /v1/unload_lora_adapter {"lora_name"}                               (vLLM)

Unregistering an adapter that running requests use is refused with 409 (they are not
cut off); once they are done it succeeds. `base_model` defaults to the server's default
model. A path outside the model directories needs the admin key, as any registration of
a local file does (router/core/security.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictStr

from juggler.engine_args import parse_llamacpp_args
from juggler.options import EngineFlags
from juggler.router.core.bodies import parse
from juggler.router.core.deps import is_local_owner, state_of
from juggler.router.core.openapi import body_of

router = APIRouter()
compat = APIRouter()


class RegisterAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: StrictStr = Field(min_length=1, max_length=4096)
    base_model: StrictStr | None = None


class LoadLoraAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lora_name: StrictStr = Field(min_length=1)
    lora_path: StrictStr = Field(min_length=1, max_length=4096)
    base_model: StrictStr | None = None


class UnloadLoraAdapter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lora_name: StrictStr = Field(min_length=1)


def max_active_adapters(llamacpp_args: str) -> int:
    """The limit a backend started with these server-wide args runs with."""
    value = parse_llamacpp_args(llamacpp_args).get("max_active_adapters")
    default: int = EngineFlags.model_fields["max_active_adapters"].default
    return int(value) if value is not None else default


@router.get("/adapters/info")
async def adapters_info(request: Request) -> dict[str, Any]:
    state = state_of(request)
    active = await state.adapters.active(state.manager, state.proxy.client)
    return {
        "config": {
            "enabled": True,
            "maxActiveAdapters": max_active_adapters(state.settings.llamacpp_args),
        },
        "state": {"activeAdapters": active},
    }


@router.get("/adapters")
async def list_adapters(request: Request) -> dict[str, Any]:
    adapters = state_of(request).adapters
    return {
        "object": "list",
        "data": [
            {
                "id": a.adapter_id,
                "path": a.path,
                "base_model": a.base_model,
                "running_requests": adapters.in_flight(a.adapter_id),
            }
            for a in adapters.book.list()
        ],
    }


async def _register(request: Request, adapter_id: str, path: str, base: str | None) -> Any:
    state = state_of(request)
    info = await state.adapters.register(adapter_id, path, base, is_admin=is_local_owner(request))
    return {
        "status": "success",
        "message": f"Registered LoRA adapter {info.adapter_id} for {info.base_model}",
        "id": info.adapter_id,
        "base_model": info.base_model,
        "path": info.path,
    }


async def _unregister(request: Request, adapter_id: str) -> dict[str, Any]:
    state = state_of(request)
    await state.adapters.unregister(adapter_id, state.manager, state.proxy.client)
    return {"status": "success", "message": f"Unregistered LoRA adapter {adapter_id}"}


@router.post("/adapters/{adapter_id}", openapi_extra=body_of(RegisterAdapter))
async def register(adapter_id: str, request: Request) -> Any:
    body, _ = await parse(request, RegisterAdapter)
    return await _register(request, adapter_id, body.path, body.base_model)


@router.delete("/adapters/{adapter_id}")
async def unregister(adapter_id: str, request: Request) -> dict[str, Any]:
    return await _unregister(request, adapter_id)


@compat.post("/load_lora_adapter", openapi_extra=body_of(LoadLoraAdapter))
async def load_lora_adapter(request: Request) -> Any:
    body, _ = await parse(request, LoadLoraAdapter)
    return await _register(request, body.lora_name, body.lora_path, body.base_model)


@compat.post("/unload_lora_adapter", openapi_extra=body_of(UnloadLoraAdapter))
async def unload_lora_adapter(request: Request) -> dict[str, Any]:
    body, _ = await parse(request, UnloadLoraAdapter)
    return await _unregister(request, body.lora_name)
