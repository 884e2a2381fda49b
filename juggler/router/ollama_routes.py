"""Ollama's inference routes: `/api/chat`, `/api/generate` (NDJSON streaming, the
default, or one JSON object with `stream: false`), `/api/embed` and the older
`/api/embeddings`.

A thin dialect: bodies and their meaning are `juggler.api.ollama` (`format` and
`tools`: `juggler.api.ollama_chat`; embeddings' `truncate` and `dimensions`:
`juggler.api.ollama_embed`, with their I/O in `juggler.router.ollama_embed`); residency
goes through the manager (`residency.ensure_options` for `options` and `keep_alive`);
inference through the proxy to the same backend routes the OpenAI API uses. The backend
is always asked to stream (with usage), so the router times the answer itself
(`ollama_answer`).
An empty `messages`/`prompt` loads the model (with `keep_alive: 0`, unloads it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from juggler.api import ollama as ol
from juggler.api import ollama_embed as oe
from juggler.api import ollama_options as oo
from juggler.api import sse
from juggler.errors import BadRequest, NotImplementedParam
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.load_options import ollama_options
from juggler.router.core.openapi import body_of
from juggler.router.ollama_answer import OllamaAnswer, backend_error
from juggler.router.ollama_embed import embed_texts
from juggler.router.residency import (
    current_options,
    ensure_options,
    keep_alive_after,
    unload_if_loaded,
)

router = APIRouter()
NDJSON = "application/x-ndjson"


def _keep(keep: Any) -> dict[str, Any]:
    """keep_alive as options, applied once the request is done (Ollama: "how long the
    model will stay loaded into memory following the request")."""
    return {} if keep is None else oo.keep_alive_options(oo.parse_keep_alive(keep))


async def _load_only(
    state: RouterState, asked: str, model: str, load: dict[str, Any], keep: Any, chat: bool
) -> dict[str, Any]:
    """Ollama: an empty prompt loads the model; with keep_alive 0 it unloads it."""
    if keep is not None and oo.parse_keep_alive(keep) == 0:
        await unload_if_loaded(state, model)
        reason = "unload"
    else:
        await ensure_options(state, model, load)
        await state.manager.load(model, current_options(state, model) or None)
        await keep_alive_after(state, model, _keep(keep))
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
    keep: dict[str, Any],
) -> Response:
    answer.from_chat = path == "/v1/chat/completions"
    response = await state.proxy.forward(model, path, body)
    answer.t_open = time.perf_counter()
    if not isinstance(response, StreamingResponse):
        raise backend_error(response)
    chunks: Any = response.body_iterator
    if stream:
        lines = _closing(answer.ndjson, chunks, lambda: keep_alive_after(state, model, keep))
        return StreamingResponse(lines, media_type=NDJSON)
    events = sse.read_data(chunks)
    try:
        whole = await answer.whole(events, request)
    finally:
        await events.aclose()
        await chunks.aclose()  # the relay releases its lease and the backend response
    await keep_alive_after(state, model, keep)
    return JSONResponse(whole)


async def _closing(translate: Any, chunks: Any, after: Any) -> AsyncIterator[bytes]:
    """`translate(events)`, closing the backend relay however the stream ends (done, or
    the client went away), so its lease is released at once; then `after()`."""
    events = sse.read_data(chunks)
    try:
        async for line in translate(events):
            yield line
    finally:
        await events.aclose()
        await chunks.aclose()
    await after()


@router.post("/api/chat", openapi_extra=body_of(ol.ChatBody))
async def chat(request: Request) -> Any:
    t0 = time.perf_counter()
    state = state_of(request)
    body, _ = await parse(request, ol.ChatBody)
    model = state.registry.lookup(body.model).name
    sampling, load = oo.split_options(ollama_options(body.options))
    if not body.messages:
        return await _load_only(state, body.model, model, load, body.keep_alive, chat=True)
    base = ol.chat_request(body)
    await ensure_options(state, model, load)
    oa = ol.openai_body(model, base, sampling)
    answer = OllamaAnswer(body.model, True, t0)
    keep = _keep(body.keep_alive)
    path = "/v1/chat/completions"
    return await _generate(request, state, answer, model, path, oa, body.stream, keep)


@router.post("/api/generate", openapi_extra=body_of(ol.GenerateBody))
async def generate(request: Request) -> Any:
    t0 = time.perf_counter()
    state = state_of(request)
    body, _ = await parse(request, ol.GenerateBody)
    model = state.registry.lookup(body.model).name
    path, base = ol.generate_request(body)
    sampling, load = oo.split_options(ollama_options(body.options))
    if not body.prompt and not body.system:
        return await _load_only(state, body.model, model, load, body.keep_alive, chat=False)
    await ensure_options(state, model, load)
    oa = ol.openai_body(model, base, sampling)
    answer = OllamaAnswer(body.model, False, t0)
    keep = _keep(body.keep_alive)
    return await _generate(request, state, answer, model, path, oa, body.stream, keep)


async def _embed(
    state: RouterState,
    model: str,
    texts: list[str],
    body: ol.EmbedBody | ol.EmbeddingsBody,
    truncate: bool,
) -> tuple[list[list[float]], int]:
    sampling, load = oo.split_options(ollama_options(body.options))
    if sampling:
        raise NotImplementedParam(f"options.{next(iter(sampling))}", "embeddings do not sample")
    await ensure_options(state, model, load)
    if not texts:
        await state.manager.load(model, current_options(state, model) or None)
        await keep_alive_after(state, model, _keep(body.keep_alive))
        return [], 0
    vectors, n_tokens = await embed_texts(state, model, texts, truncate=truncate)
    await keep_alive_after(state, model, _keep(body.keep_alive))
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
    vectors, n_tokens = await _embed(state, model, texts, body, truncate)
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
    vectors, _ = await _embed(state, model, texts, body, True)
    if not vectors and body.prompt:
        raise BadRequest("the backend returned no embedding", param="prompt")
    return {"embedding": vectors[0] if vectors else []}
