"""OpenAI-compatible inference routes, mounted under both /v1 and /api/v1."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler.api.openai import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    RerankRequest,
    TokenizeRequest,
)
from juggler.registry.checkpoint import is_available
from juggler.router.bodies import parse_for_model
from juggler.router.catalog_view import model_entry
from juggler.router.deps import state_of
from juggler.router.openapi import body_of

router = APIRouter()


@router.get("/models")
async def list_models(request: Request, show_all: str = "false") -> dict[str, Any]:
    """Lemonade: downloaded models only (as OpenAI's list), every catalog model with
    `show_all=true`."""
    state = state_of(request)
    everything = show_all.lower() in ("true", "1", "yes")
    data = [
        model_entry(m, state.pins.saved_options(m.name))
        for m in state.registry.list()
        if everything or is_available(m)
    ]
    return {"object": "list", "data": data}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    info = state.registry.get(model_id)
    return model_entry(info, state.pins.saved_options(info.name))


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
    if raw.get("encoding_format") != "base64":
        return await state_of(request).proxy.forward(model, "/v1/embeddings", raw)
    response = await state_of(request).proxy.forward(
        model, "/v1/embeddings", {**raw, "encoding_format": "float"}
    )
    if response.status_code != 200:
        return response
    data = json.loads(bytes(response.body))
    for item in data.get("data", []):
        item["embedding"] = base64.b64encode(
            np.asarray(item["embedding"], dtype="<f4").tobytes()
        ).decode()
    return JSONResponse(data)


@router.post("/rerank", openapi_extra=body_of(RerankRequest))
@router.post("/reranking", openapi_extra=body_of(RerankRequest))
async def rerank(request: Request) -> Response:
    model, raw = await parse_for_model(request, RerankRequest)
    return await state_of(request).proxy.forward(model, "/v1/rerank", raw)


@router.post("/tokenize", openapi_extra=body_of(TokenizeRequest))
async def tokenize(request: Request) -> Response:
    """llama.cpp's tokenize: {model, content, add_special?} -> {tokens}."""
    model, raw = await parse_for_model(request, TokenizeRequest)
    return await state_of(request).proxy.forward(model, "/tokenize", raw)


@router.post("/detokenize", openapi_extra=body_of(DetokenizeRequest))
async def detokenize(request: Request) -> Response:
    """llama.cpp's detokenize: {model, tokens} -> {content}."""
    model, raw = await parse_for_model(request, DetokenizeRequest)
    return await state_of(request).proxy.forward(model, "/detokenize", raw)
