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
)
from juggler.registry.adapters import AdapterInfo
from juggler.registry.checkpoint import is_available
from juggler.router import load_options
from juggler.router.bodies import model_of, parse_for_model, read_json, validate
from juggler.router.catalog_view import STARTED, model_entry
from juggler.router.deps import state_of
from juggler.router.openapi import body_of

router = APIRouter()


def adapter_entry(info: AdapterInfo) -> dict[str, Any]:
    """A LoRA adapter in the model list, with its parent (as vLLM lists them)."""
    return {
        "id": info.adapter_id,
        "object": "model",
        "created": STARTED,
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
async def list_models(request: Request, show_all: str = "false") -> dict[str, Any]:
    """Lemonade: downloaded models only (as OpenAI's list), every catalog model with
    `show_all=true`; then the LoRA adapters."""
    state = state_of(request)
    everything = show_all.lower() in ("true", "1", "yes")
    models = [
        model_entry(m, state.pins.saved_options(m.name))
        for m in state.registry.list()
        if everything or is_available(m)
    ]
    adapters = [adapter_entry(a) for a in state.adapters.book.list()]
    return {"object": "list", "data": models + adapters}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    adapter = state.adapters.book.get(model_id)
    if adapter is not None and state.registry.find(model_id) is None:
        return adapter_entry(adapter)
    info = state.registry.get(model_id)
    entry = model_entry(info, state.pins.saved_options(info.name))
    if info.name != model_id and state.registry.aliases.resolve(model_id) is not None:
        entry["id"] = model_id  # Lemonade: an alias is shown under its own name
    return entry


async def _generate(
    request: Request, body: type[ChatRequest | CompletionRequest], path: str
) -> Response:
    """Forward a generation to its model's backend; a LoRA adapter named as the model runs
    on its base model with that adapter."""
    state = state_of(request)
    # Lemonade's load options may ride along: only its allowlist reaches an auto-load.
    raw, auto_load = load_options.split(await read_json(request))
    model = model_of(validate(body, raw))
    if auto_load:
        state.settings.model_options(auto_load)  # a bad ctx_size: 400 before any load
    target = state.adapters.route(model, raw)
    end = state.adapters.hold(target)
    try:
        return await state.proxy.forward(
            target.model,
            path,
            raw,
            client_request=request,
            on_release=end,
            load_options=auto_load,
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


@router.post("/detokenize", openapi_extra=body_of(DetokenizeRequest))
async def detokenize(request: Request) -> Response:
    """llama.cpp's detokenize: {model, tokens} -> {content}."""
    model, raw = await parse_for_model(request, DetokenizeRequest)
    return await state_of(request).proxy.forward(model, "/detokenize", raw)
