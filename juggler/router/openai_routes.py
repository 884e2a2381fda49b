"""OpenAI-compatible inference routes, mounted under both /v1 and /api/v1."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from juggler.api.openai import ChatRequest, CompletionRequest, EmbeddingRequest, RerankRequest
from juggler.registry.adapters import AdapterInfo
from juggler.registry.checkpoint import is_available
from juggler.router.bodies import parse_for_model
from juggler.router.deps import state_of
from juggler.router.openapi import body_of
from juggler.types import ModelInfo

router = APIRouter()
_STARTED = int(time.time())


def model_entry(info: ModelInfo) -> dict[str, Any]:
    """One model in Lemonade's /models shape (a superset of OpenAI's)."""
    return {
        "id": info.name,
        "object": "model",
        "created": _STARTED,
        "owned_by": "juggler",
        "checkpoint": info.checkpoint,
        "recipe": info.recipe,
        "labels": list(info.labels),
        "type": info.type.value,
        "downloaded": is_available(info),
        "suggested": info.suggested,
    }


def adapter_entry(info: AdapterInfo) -> dict[str, Any]:
    """A LoRA adapter in the model list, with its parent (as vLLM lists them)."""
    return {
        "id": info.adapter_id,
        "object": "model",
        "created": _STARTED,
        "owned_by": "juggler",
        "parent": info.base_model,
        "root": info.path,
        "checkpoint": info.path,
        "recipe": "lora",
        "labels": ["lora"],
        "type": "llm",
        "downloaded": True,
        "suggested": False,
    }


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    state = state_of(request)
    models = [model_entry(m) for m in state.registry.list()]
    adapters = [adapter_entry(a) for a in state.adapters.book.list()]
    return {"object": "list", "data": models + adapters}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    adapter = state.adapters.book.get(model_id)
    if adapter is not None and state.registry.find(model_id) is None:
        return adapter_entry(adapter)
    return model_entry(state.registry.get(model_id))


async def _generate(
    request: Request, body: type[ChatRequest | CompletionRequest], path: str
) -> Response:
    """Forward a generation to its model's backend; a LoRA adapter named as the model runs
    on its base model with that adapter."""
    state = state_of(request)
    model, raw = await parse_for_model(request, body)
    target = state.adapters.route(model, raw)
    end = state.adapters.hold(target)
    try:
        return await state.proxy.forward(
            target.model, path, raw, client_request=request, on_release=end
        )
    except BaseException:
        end()
        raise


@router.post("/chat/completions", openapi_extra=body_of(ChatRequest))
async def chat_completions(request: Request) -> Response:
    return await _generate(request, ChatRequest, "/v1/chat/completions")


@router.post("/completions", openapi_extra=body_of(CompletionRequest))
async def completions(request: Request) -> Response:
    return await _generate(request, CompletionRequest, "/v1/completions")


@router.post("/embeddings", openapi_extra=body_of(EmbeddingRequest))
async def embeddings(request: Request) -> Response:
    model, raw = await parse_for_model(request, EmbeddingRequest)
    return await state_of(request).proxy.forward(model, "/v1/embeddings", raw)


@router.post("/rerank", openapi_extra=body_of(RerankRequest))
@router.post("/reranking", openapi_extra=body_of(RerankRequest))
async def rerank(request: Request) -> Response:
    model, raw = await parse_for_model(request, RerankRequest)
    return await state_of(request).proxy.forward(model, "/v1/rerank", raw)
