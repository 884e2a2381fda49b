"""OpenAI-compatible inference routes, mounted under both /v1 and /api/v1."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler.api.embeddings import EmbeddingRequest, RerankRequest
from juggler.api.openai import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
)
from juggler.errors import BadRequest
from juggler.manager import auto_ctx
from juggler.registry.adapters import AdapterInfo
from juggler.registry.checkpoint import is_available
from juggler.router.core import load_options
from juggler.router.core.bodies import model_of, parse_for_model, read_json, validate
from juggler.router.core.catalog_view import (
    STARTED,
    FileFacts,
    file_facts,
    max_context_window,
    model_entry,
)
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.image_fetch import inline_images
from juggler.router.core.modelfile_requests import apply_modelfile
from juggler.router.core.openapi import body_of
from juggler.types import ModelInfo

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


def _loaded_ctx(state: RouterState) -> dict[str, int]:
    """The context size of each loaded (or loading) model."""
    return {s.model_name: s.options.ctx_size for s in state.manager.snapshot()}


def context_length(
    state: RouterState, info: ModelInfo, loaded: Mapping[str, int], facts: FileFacts
) -> int | None:
    """openai.md: `context_length` "Uses the loaded value when the model is running and
    the configured `ctx_size` otherwise (omitted when neither is known)": a llama.cpp
    model's saved options over the server's settings (what its next load would use). An
    automatic size (-1) is never shown (Lemonade's test 006c): it is the size a load now
    would choose (`auto_ctx.listed_size`)."""
    if info.name in loaded:
        return loaded[info.name]
    if info.recipe != "llamacpp":
        return None
    try:
        saved = state.pins.saved_options(info.name)
        options = state.settings.model_options(None, saved=saved)
    except BadRequest:  # saved options a load would refuse: no size to tell
        return None
    trained = max_context_window(info, facts)
    return auto_ctx.listed_size(options, facts.gguf, trained, state.settings)


def _entry(
    state: RouterState, info: ModelInfo, loaded: Mapping[str, int], shown_as: str | None = None
) -> dict[str, Any]:
    facts = file_facts(info)
    ctx = context_length(state, info, loaded, facts)
    entry = model_entry(info, state.pins.saved_options(info.name), context_length=ctx, facts=facts)
    if shown_as is not None:
        entry["id"] = shown_as  # Lemonade: an alias is shown under its own name
    return entry


@router.get("/models")
async def list_models(request: Request, show_all: str = "false") -> dict[str, Any]:
    """Lemonade: downloaded models only (as OpenAI's list), every catalog model with
    `show_all=true`, each alias of a listed model under its own name (as Lemonade lists
    them); then the LoRA adapters."""
    state = state_of(request)
    everything = show_all.lower() in ("true", "1", "yes")
    loaded = _loaded_ctx(state)
    listed = {m.name: m for m in state.registry.list() if everything or is_available(m)}
    models = [_entry(state, m, loaded) for m in listed.values()]
    for alias in sorted(state.registry.aliases.read()):
        info = state.registry.find(alias)
        if alias not in listed and info is not None and info.name in listed:
            models.append(_entry(state, info, loaded, shown_as=alias))
    adapters = [adapter_entry(a) for a in state.adapters.book.list()]
    return {"object": "list", "data": models + adapters}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    adapter = state.adapters.book.get(model_id)
    if adapter is not None and state.registry.find(model_id) is None:
        return adapter_entry(adapter)
    info = state.registry.get(model_id)
    alias = info.name != model_id and state.registry.aliases.resolve(model_id) is not None
    return _entry(state, info, _loaded_ctx(state), shown_as=model_id if alias else None)


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
    await inline_images(raw, state.settings)  # http(s) images, where allowed (issue 51)
    apply_modelfile(state, model, path, raw)  # a created model's Modelfile (Ollama's)
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
            hand_off=raw.get("stream") is True,  # its bytes go to the client as they are
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
    proxy = state_of(request).proxy
    # Issue 52: a client that leaves gets the backend request closed (its work stops).
    if raw.get("encoding_format") != "base64":
        return await proxy.forward(model, "/v1/embeddings", raw, client_request=request)
    response = await proxy.forward(
        model, "/v1/embeddings", {**raw, "encoding_format": "float"}, client_request=request
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
@router.post("/reranker", openapi_extra=body_of(RerankRequest))
async def rerank(request: Request) -> Response:
    model, raw = await parse_for_model(request, RerankRequest)
    return await state_of(request).proxy.forward(model, "/v1/rerank", raw, client_request=request)


@router.post("/detokenize", openapi_extra=body_of(DetokenizeRequest))
async def detokenize(request: Request) -> Response:
    """llama.cpp's detokenize: {model, tokens} -> {content}."""
    model, raw = await parse_for_model(request, DetokenizeRequest)
    return await state_of(request).proxy.forward(model, "/detokenize", raw)
