"""The backend's HTTP app: OpenAI routes, the session API, embeddings, health, stats.

Every route runs on the event loop; it validates (with the request bodies the router
shares, `juggler.api.openai`), calls the `Engine` (which talks to the master through
commands) and turns a `StreamSink` into an answer (`streaming`).

/health answers 200 once the engine is ready, 503 `{"status": "loading"}` before, and 503
`{"status": "dead", ...}` once a worker died: the router's manager then replaces the
backend.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from juggler.api import openai as api
from juggler.api.embeddings import EmbeddingRequest, RerankRequest
from juggler.api.responses import RESPONSE_ID, RESPONSE_ID_HEADER, ResponsesRequest
from juggler.backend_key import ENV as KEY_ENV
from juggler.backend_key import HEADER, key_matches
from juggler.engine.http import handoff, memory, openai_routes, responses_api, slots
from juggler.engine.http import responses as shape
from juggler.engine.http.device_info import device_body
from juggler.engine.http.fast_lane import FastLane, error_response, is_small, parse
from juggler.engine.http.metrics import render_metrics, stats_body
from juggler.engine.http.requests import adapter_ref, sampling_params, template_messages
from juggler.engine.http.response_store import ResponseStore
from juggler.engine.http.streaming import stream, unless_gone
from juggler.engine.runtime import Engine
from juggler.engine.schedule.stream import RequestStats
from juggler.engine.structured.tools import ToolCaps, chat_messages, template_caps, tool_plan
from juggler.errors import BadRequest, EngineError, JugglerError, Unauthorized, render
from juggler.options import bad_request_of

log = logging.getLogger(__name__)


class RouterOnly:
    """Issue 27: with a key in its environment (the router's spawner puts one there), the
    backend answers no request that does not carry it, `/health` included: 401."""

    def __init__(self, app: ASGIApp, *, key: str) -> None:
        self.app = app
        self.key = key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope.get("headers", []) if k == HEADER.encode()), None)
            if not key_matches(given.decode("latin-1") if given else None, self.key):
                error = Unauthorized("this backend answers its router only")
                body = json.dumps(render(error)).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def create_app(engine: Engine, key: str | None = None) -> ASGIApp:
    """The backend's app; `key` (default: the environment's, see `juggler.backend_key`)
    is required on every request when set."""
    name = engine.config.model_name
    key = key if key is not None else os.environ.get(KEY_ENV)

    #: Where the router sends client connections (`handoff`), while the app runs.
    inbox: handoff.Inbox | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal inbox
        await engine.start()
        inbox = handoff.open_inbox() if engine.is_llm else None
        if inbox is not None:
            inbox.start()
        try:
            yield
        finally:
            if inbox is not None:
                inbox.close()
                inbox = None
            await engine.stop()

    app = FastAPI(title="juggler-engine", lifespan=lifespan)

    @app.exception_handler(JugglerError)
    async def on_juggler_error(request: Request, exc: JugglerError) -> Response:
        return error_response(exc)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Last resort: still OpenAI's JSON shape (Starlette logs the traceback).
        error = EngineError(f"internal error: {type(exc).__name__}")
        return JSONResponse(render(error), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        return JSONResponse(render(bad_request_of(first, skip=("body",))), status_code=400)

    @app.get("/health")
    async def health() -> JSONResponse:
        if not engine.is_ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        flags = engine.config.flags
        body = {
            "status": "ok",
            "model": name,
            "type": str(engine.config.type),
            **device_body(engine),
            "workers": engine.config.num_workers,
            "parallel": flags.parallel,
            "ctx_size": flags.ctx_size,
            "kv_cells": flags.n_cells,
            "threads_batch": flags.threads_batch,
            "pid": os.getpid(),
            "chat_template": engine.template.origin,
            "memory": memory.memory_body(engine),
            "compute": engine.governor.status(),
        }
        dead = engine.dead
        if dead is not None:
            body.update(status="dead", error=dead.message)
            return JSONResponse(body, status_code=503)
        if engine.is_stalled:  # issue 27: a worker holds work and makes no progress
            stuck = engine.stalled_for()
            body.update(status="stalled", error=f"a worker made no progress for {stuck:.0f} s")
            return JSONResponse(body, status_code=503)
        return JSONResponse(body)

    @app.post("/internal/downsize")
    async def downsize() -> dict[str, Any]:
        """Seed 002's soft idle (the router's manager asks; loopback only)."""
        return await memory.downsize(engine)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": 0, "owned_by": "juggler"}],
        }

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return stats_body(engine)

    @app.get("/metrics")
    async def metrics() -> Response:
        body, ctype = render_metrics(engine)
        return Response(body, media_type=ctype)

    # -- OpenAI ----------------------------------------------------------------------
    caps = template_caps(engine.template) if engine.is_llm else ToolCaps()

    async def chat(request: Request, raw: bytes) -> Any:
        body = parse(raw, api.ChatRequest)
        inline = is_small(raw, body.tools, body.response_format, body.grammar, body.json_schema)
        answer = await openai_routes.chat(engine, caps, body, request, inline=inline)
        return handoff.take_over(inbox, request, answer)

    async def completions(request: Request, raw: bytes) -> Any:
        body = parse(raw, api.CompletionRequest)
        inline = is_small(raw, body.grammar, body.json_schema)
        answer = await openai_routes.completions(engine, body, request, inline=inline)
        return handoff.take_over(inbox, request, answer)

    @app.post("/internal/chat_tokens")
    async def chat_tokens(body: api.ChatRequest) -> dict[str, int]:
        """Issue 52: the prompt tokens of a chat, from the template and the tokenizer
        alone (no prefill): Anthropic's count_tokens. The same rendering a chat gets."""
        engine.require_llm()

        def count() -> int:
            if body.juggler_prompt is not None:  # a created model's TEMPLATE, rendered
                return len(engine.tokenize_prompt(body.juggler_prompt))
            plan = tool_plan(body.tools, body.tool_choice, body.parallel_tool_calls, caps)
            think = openai_routes.chat_think(engine, caps, body)
            messages, tools = chat_messages(body.messages, plan, caps)
            return len(openai_routes.render(engine, messages, tools, think))

        return {"prompt_tokens": await run_in_threadpool(count)}

    # -- the Responses API -----------------------------------------------------------
    store = ResponseStore(engine.end_session, cell_budget=engine.config.flags.ctx_size // 2)

    @app.post("/v1/responses", response_model=None)
    async def create_response(body: ResponsesRequest, request: Request) -> Any:
        # The router picks the id (so that it knows where the response lives).
        rid = request.headers.get(RESPONSE_ID_HEADER, "")
        rid = rid if re.match(RESPONSE_ID, rid) else f"resp_{uuid.uuid4().hex}"
        return await responses_api.create(engine, caps, store, body, request, rid)

    @app.get("/v1/responses/{response_id}")
    async def get_response(response_id: str) -> dict[str, Any]:
        return store.get(response_id).body

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(response_id: str) -> dict[str, Any]:
        store.delete(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    # -- sessions --------------------------------------------------------------------
    @app.post("/v1/sessions")
    async def create_session(request: Request) -> dict[str, Any]:
        raw = await request.body()
        body = (
            api.BackendSessionCreate.model_validate_json(raw)
            if raw.strip()
            else api.BackendSessionCreate()
        )
        return await engine.create_session(adapter_ref(body.juggler_adapter))

    @app.delete("/internal/adapters/{adapter_id}")
    async def drop_adapter(adapter_id: str) -> dict[str, Any]:
        """Unload an unregistered LoRA adapter (the router asks; 409 while in use)."""
        return await engine.drop_adapter(adapter_id)

    @app.post("/v1/sessions/{session_id}/input")
    async def session_input(session_id: str, body: api.SessionInput) -> dict[str, Any]:
        if (body.text is None) == (body.messages is None):
            raise BadRequest("send exactly one of text or messages", param="text")
        msgs = template_messages(body.messages) if body.messages else None
        return await engine.append_input(session_id, text=body.text, messages=msgs)

    @app.post("/v1/sessions/{session_id}/generate")
    async def session_generate(
        session_id: str, body: api.SessionGenerate, request: Request
    ) -> StreamingResponse:
        ctx_size, n_vocab = engine.config.flags.ctx_size, engine.model.n_vocab
        params = sampling_params(body, ctx_size, body.max_new_tokens, n_vocab=n_vocab)
        params = await run_in_threadpool(openai_routes.checked, engine, params)
        sink = await unless_gone(request, engine.generate(session_id, params))

        def on_token(text: str, ids: tuple[int, ...]) -> Any:
            return {"text": text, "token_ids": list(ids)}

        def on_done(finish: str | None, st: RequestStats | None) -> list[Any]:
            return [
                {"done": True, "finish_reason": finish, "usage": shape.usage(st, extended=True)}
            ]

        return stream(sink, on_token, on_done)

    @app.post("/v1/sessions/{session_id}/cancel")
    async def session_cancel(session_id: str) -> dict[str, Any]:
        return await engine.cancel(session_id)

    @app.delete("/v1/sessions/{session_id}")
    async def session_end(session_id: str) -> dict[str, Any]:
        return await engine.end_session(session_id)

    # -- llama.cpp server's /slots and /tokenize (http/slots.py), and /detokenize --------
    slots.add_routes(app, engine)

    @app.post("/detokenize")
    async def detokenize(body: api.DetokenizeRequest) -> dict[str, Any]:
        n_vocab = engine.model.n_vocab
        bad = next((t for t in body.tokens if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise BadRequest(
                f"token {bad} is outside the vocabulary (0..{n_vocab - 1})", param="tokens"
            )
        text = b"".join(engine.model.piece(t) for t in body.tokens)
        return {"content": text.decode("utf-8", errors="replace")}

    # -- embeddings / reranking ------------------------------------------------------
    # Issue 52: the work stops (at its next piece) once the client left.
    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
        vecs, n_tokens = await unless_gone(request, engine.embed(body.inputs()))
        return {
            "object": "list",
            "model": name,
            "data": [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)
            ],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    async def rerank(body: RerankRequest, request: Request) -> dict[str, Any]:
        scores, n_tokens = await unless_gone(request, engine.rerank(body.query, body.documents))
        order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
        if body.top_n is not None:
            order = order[: body.top_n]
        results = []
        for i in order:
            item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            if body.return_documents:
                item["document"] = {"text": body.documents[i]}
            results.append(item)
        return {
            "model": name,
            "object": "list",
            "results": results,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    app.post("/v1/rerank")(rerank)
    app.post("/v1/reranking")(rerank)
    app.post("/rerank")(rerank)
    lane = FastLane(app, {"/v1/chat/completions": chat, "/v1/completions": completions})
    return RouterOnly(lane, key=key) if key else lane
