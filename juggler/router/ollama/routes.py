"""Ollama's inference routes: `/api/chat`, `/api/generate` (NDJSON streaming, the
default, or one JSON object with `stream: false`), `/api/embed` and the older
`/api/embeddings`.

A thin dialect: a body (`wire`) becomes the OpenAI body every backend speaks and one
`OllamaRequestOptions` (`request`: its `options` and `keep_alive`, read once); the
model's load options and keep_alive go through the manager (`residency`); inference
through the proxy to the same backend routes the OpenAI API uses. The backend is always
asked to stream (with usage), so the router times the answer itself (`answer`).
Embeddings are `embed` (I/O) over `embed_rules` (Ollama's `truncate` and `dimensions`).
An empty `messages`/`prompt` loads the model (with `keep_alive: 0`, unloads it).
A model made by `/api/create` answers with its Modelfile's SYSTEM, TEMPLATE,
PARAMETERs, MESSAGEs (`applied`) and ADAPTER (`core/adapters`).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from juggler.api.streams import ClosingStreamingResponse
from juggler.errors import BadRequest
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.modelfiles import book_of
from juggler.router.core.openapi import body_of
from juggler.router.core.relay import read_whole, translated
from juggler.router.ollama import applied
from juggler.router.ollama import embed_rules as oe
from juggler.router.ollama import wire as ol
from juggler.router.ollama.answer import OllamaAnswer, backend_error
from juggler.router.ollama.embed import embed_texts, vector_size
from juggler.router.ollama.options import OllamaRequestOptions
from juggler.router.ollama.request import (
    chat_request,
    generate_request,
    openai_body,
    request_options,
)
from juggler.router.ollama.residency import (
    current_options,
    ensure_options,
    keep_alive_after,
    unload_if_loaded,
)

router = APIRouter()
CHAT_PATH = "/v1/chat/completions"


async def _load_only(
    state: RouterState, asked: str, model: str, options: OllamaRequestOptions, chat: bool
) -> dict[str, Any]:
    """Ollama: an empty prompt loads the model; with keep_alive 0 it unloads it."""
    if options.unloads:
        await unload_if_loaded(state, model)
        reason = "unload"
    else:
        await ensure_options(state, model, options.load)
        await state.manager.load(model, current_options(state, model) or None)
        await keep_alive_after(state, model, options)
        reason = "load"
    out: dict[str, Any] = {"model": asked, "created_at": ol.now_iso()}
    if chat:
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return {**out, "done": True, "done_reason": reason}


async def _generate(
    request: Request,
    state: RouterState,
    answer: OllamaAnswer,
    model: str,
    path: str,
    body: dict[str, Any],
    stream: bool,
    options: OllamaRequestOptions,
) -> Response:
    """Forward the OpenAI body; answer in Ollama's objects; then apply keep_alive (Ollama:
    "how long the model will stay loaded into memory following the request")."""
    answer.from_chat = path == CHAT_PATH
    target = state.adapters.route(model, body)  # a created model's ADAPTER
    end = state.adapters.hold(target)
    try:
        response = await state.proxy.forward(target.model, path, body, on_release=end)
    except BaseException:
        end()
        raise
    answer.t_open = time.perf_counter()
    if not isinstance(response, StreamingResponse):
        raise backend_error(response)
    if stream:
        lines = translated(response, answer.ndjson, lambda: keep_alive_after(state, model, options))
        return ClosingStreamingResponse(lines, media_type=ol.NDJSON)
    whole = await read_whole(response, lambda events: answer.whole(events, request))
    await keep_alive_after(state, model, options)
    return JSONResponse(whole)


@router.post("/api/chat", openapi_extra=body_of(ol.ChatBody))
async def chat(request: Request) -> Any:
    t0 = time.perf_counter()
    state = state_of(request)
    body, _ = await parse(request, ol.ChatBody)
    model = state.registry.lookup(body.model).name
    defaults = book_of(state).get(model)
    body = applied.chat_body(defaults, body)
    options = request_options(body)
    if not body.messages:
        return await _load_only(state, body.model, model, options, chat=True)
    path, base = CHAT_PATH, chat_request(body)
    if defaults.template:
        path, base = applied.templated(defaults.template, path, base)
    await ensure_options(state, model, options.load)
    oa = openai_body(model, base, options)
    answer = OllamaAnswer(body.model, True, t0)
    return await _generate(request, state, answer, model, path, oa, body.stream, options)


@router.post("/api/generate", openapi_extra=body_of(ol.GenerateBody))
async def generate(request: Request) -> Any:
    t0 = time.perf_counter()
    state = state_of(request)
    body, _ = await parse(request, ol.GenerateBody)
    model = state.registry.lookup(body.model).name
    defaults = book_of(state).get(model)
    body = applied.generate_body(defaults, body)
    path, base = generate_request(body)
    base = applied.generate_base(defaults, body, path, base)
    if template := body.template or defaults.template:
        path, base = applied.templated(template, path, base)
    options = request_options(body)
    if not body.prompt and not body.system:
        return await _load_only(state, body.model, model, options, chat=False)
    await ensure_options(state, model, options.load)
    oa = openai_body(model, base, options)
    answer = OllamaAnswer(body.model, False, t0)
    return await _generate(request, state, answer, model, path, oa, body.stream, options)


async def _embed(
    request: Request,
    model: str,
    texts: list[str],
    body: ol.EmbedBody | ol.EmbeddingsBody,
    truncate: bool,
) -> tuple[list[list[float]], int]:
    state = state_of(request)
    options = request_options(body)
    options.refuse_sampling("embeddings do not sample")
    await ensure_options(state, model, options.load)
    if not texts:
        await state.manager.load(model, current_options(state, model) or None)
        await keep_alive_after(state, model, options)
        return [], 0
    vectors, n_tokens = await embed_texts(state, model, texts, truncate=truncate, client=request)
    await keep_alive_after(state, model, options)
    return vectors, n_tokens


@router.post("/api/embed", openapi_extra=body_of(ol.EmbedBody))
async def embed(request: Request) -> dict[str, Any]:
    """Ollama's embeddings: `truncate` (default true) cuts each input to the context,
    false refuses a long one; `dimensions` keeps the first N values, normalized again."""
    t0 = time.perf_counter()
    state = state_of(request)
    body, _ = await parse(request, ol.EmbedBody)
    model = state.registry.lookup(body.model).name
    if isinstance(body.input, str):
        texts = [body.input] if body.input else []  # Ollama: "" only loads the model
    else:
        texts = list(body.input)
    truncate = body.truncate is not False
    if body.dimensions is not None:  # issue 52: refused before anything is computed
        size = await vector_size(state, model)
        if size is not None:
            oe.check_dimensions(body.dimensions, size)
    vectors, n_tokens = await _embed(request, model, texts, body, truncate)
    if vectors:
        oe.check_dimensions(body.dimensions, len(vectors[0]))
    return {
        "model": body.model,
        "embeddings": [oe.shorten(v, body.dimensions) for v in vectors],
        "total_duration": int((time.perf_counter() - t0) * 1e9),
        "prompt_eval_count": n_tokens,
    }


@router.post("/api/embeddings", openapi_extra=body_of(ol.EmbeddingsBody))
async def embeddings(request: Request) -> dict[str, Any]:
    """Ollama's older embeddings route: one `prompt`, one `embedding` (an input longer
    than the context is truncated, as /api/embed does by default)."""
    state = state_of(request)
    body, _ = await parse(request, ol.EmbeddingsBody)
    model = state.registry.lookup(body.model).name
    texts = [body.prompt] if body.prompt else []
    vectors, _ = await _embed(request, model, texts, body, True)
    if not vectors and body.prompt:
        raise BadRequest("the backend returned no embedding", param="prompt")
    return {"embedding": vectors[0] if vectors else []}
