"""OpenAI-compatible inference routes, mounted under both /v1 and /api/v1."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from juggler.api.openai import ChatRequest, CompletionRequest, EmbeddingRequest, RerankRequest
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


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    registry = state_of(request).registry
    return {"object": "list", "data": [model_entry(m) for m in registry.list()]}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    return model_entry(state_of(request).registry.get(model_id))


@router.post("/chat/completions", openapi_extra=body_of(ChatRequest))
async def chat_completions(request: Request) -> Response:
    model, raw = await parse_for_model(request, ChatRequest)
    return await state_of(request).proxy.forward(
        model, "/v1/chat/completions", raw, client_request=request
    )


@router.post("/completions", openapi_extra=body_of(CompletionRequest))
async def completions(request: Request) -> Response:
    model, raw = await parse_for_model(request, CompletionRequest)
    return await state_of(request).proxy.forward(
        model, "/v1/completions", raw, client_request=request
    )


@router.post("/embeddings", openapi_extra=body_of(EmbeddingRequest))
async def embeddings(request: Request) -> Response:
    model, raw = await parse_for_model(request, EmbeddingRequest)
    return await state_of(request).proxy.forward(model, "/v1/embeddings", raw)


@router.post("/rerank", openapi_extra=body_of(RerankRequest))
@router.post("/reranking", openapi_extra=body_of(RerankRequest))
async def rerank(request: Request) -> Response:
    model, raw = await parse_for_model(request, RerankRequest)
    return await state_of(request).proxy.forward(model, "/v1/rerank", raw)
