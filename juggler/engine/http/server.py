"""The backend's HTTP app: OpenAI routes, the session API, embeddings, health, stats.

Every route runs on the event loop; it validates, calls the `Engine` (which talks to the
master through commands) and turns a `StreamSink` into SSE. A stream whose client goes
away is cancelled in the generator's `finally` (Starlette cancels the response task on
disconnect), so the worker stops spending tokens on it at its next tick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from juggler.engine.http import responses as api
from juggler.engine.http.metrics import render_metrics, stats_body
from juggler.engine.runtime import Engine
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamSink
from juggler.errors import BadRequest, JugglerError, error_body, render

log = logging.getLogger(__name__)


def sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


async def _drain(
    sink: StreamSink, request: Request | None = None
) -> tuple[str, str, RequestStats | None]:
    """Collect a whole generation (non-streaming requests); raises its error. A client
    that disconnects meanwhile cancels the generation."""

    async def watch() -> None:
        assert request is not None
        while (await request.receive())["type"] != "http.disconnect":
            pass
        sink.cancel()

    watcher = asyncio.create_task(watch()) if request is not None else None
    parts: list[str] = []
    try:
        while True:
            ev = await sink.get()
            parts.append(ev.text)
            if ev.kind is EventKind.DONE:
                return "".join(parts), ev.finish_reason or "stop", ev.stats
            if ev.kind is EventKind.ERROR:
                assert ev.error is not None
                raise ev.error
    finally:
        if watcher is not None:
            watcher.cancel()
        sink.cancel()


def _stream(
    sink: StreamSink,
    on_token: Callable[[str, tuple[int, ...]], Any | None],
    on_done: Callable[[str | None, RequestStats | None], list[Any]],
    head: list[Any] | None = None,
) -> StreamingResponse:
    async def gen() -> AsyncIterator[bytes]:
        try:
            for obj in head or []:
                yield sse(obj)
            while True:
                ev = await sink.get()
                if ev.kind is EventKind.TOKEN or ev.text:
                    obj = on_token(ev.text, ev.token_ids)
                    if obj is not None:
                        yield sse(obj)
                if ev.kind is EventKind.DONE:
                    for obj in on_done(ev.finish_reason, ev.stats):
                        yield sse(obj)
                    yield DONE
                    return
                if ev.kind is EventKind.ERROR:
                    assert ev.error is not None
                    yield sse(render(ev.error))
                    return
        finally:
            sink.cancel()  # no-op when finished; stops the worker if the client left

    return StreamingResponse(
        gen(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def create_app(engine: Engine) -> FastAPI:
    name = engine.config.model_name

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="juggler-engine", lifespan=lifespan)

    @app.exception_handler(JugglerError)
    async def on_juggler_error(request: Request, exc: JugglerError) -> JSONResponse:
        return JSONResponse(render(exc), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        msg = first.get("msg", "invalid request")
        return JSONResponse(
            error_body(
                f"{'.'.join(loc) or 'body'}: {msg}",
                type="invalid_request_error",
                code="invalid_request_error",
                param=".".join(loc) or None,
            ),
            status_code=400,
        )

    @app.get("/health")
    async def health() -> JSONResponse:
        if not engine.is_ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "model": name,
                "type": str(engine.config.type),
                "device": engine.device,
                "workers": engine.config.workers,
                "parallel": engine.config.parallel,
                "ctx_size": engine.config.ctx_size,
                "pid": os.getpid(),
                "chat_template": engine.template.origin,
            }
        )

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
    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: api.ChatRequest, request: Request) -> Any:
        t0 = time.perf_counter()
        engine._require_llm()
        prompt = engine.tokenize_prompt(
            engine.render_chat([m.as_template_input() for m in body.messages])
        )
        sink = await engine.complete(
            prompt, body.sampling(engine.config.ctx_size), t0, incremental=body.stream
        )
        rid = api.new_id("chatcmpl")
        if not body.stream:
            text, finish, st = await _drain(sink, request)
            return api.chat_response(rid, name, text, api.openai_finish(finish), st)
        created = int(time.time())

        def on_token(text: str, ids: tuple[int, ...]) -> Any:
            return api.chat_chunk(rid, name, created, {"content": text}) if text else None

        def on_done(finish: str | None, st: RequestStats | None) -> list[Any]:
            out = [api.chat_chunk(rid, name, created, {}, api.openai_finish(finish))]
            if body.include_usage:
                out.append(api.usage_chunk(rid, name, created, "chat.completion.chunk", st))
            return out

        head = [api.chat_chunk(rid, name, created, {"role": "assistant", "content": ""})]
        return _stream(sink, on_token, on_done, head)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: api.CompletionRequest, request: Request) -> Any:
        t0 = time.perf_counter()
        engine._require_llm()
        prompt = engine.tokenize_prompt(body.prompt_text())
        sink = await engine.complete(
            prompt, body.sampling(engine.config.ctx_size), t0, incremental=body.stream
        )
        rid = api.new_id("cmpl")
        if not body.stream:
            text, finish, st = await _drain(sink, request)
            return api.completion_response(rid, name, text, api.openai_finish(finish), st)
        created = int(time.time())

        def on_token(text: str, ids: tuple[int, ...]) -> Any:
            return api.completion_chunk(rid, name, created, text) if text else None

        def on_done(finish: str | None, st: RequestStats | None) -> list[Any]:
            out = [api.completion_chunk(rid, name, created, "", api.openai_finish(finish))]
            if body.include_usage:
                out.append(api.usage_chunk(rid, name, created, "text_completion", st))
            return out

        return _stream(sink, on_token, on_done)

    # -- sessions --------------------------------------------------------------------
    @app.post("/v1/sessions")
    async def create_session(request: Request) -> dict[str, Any]:
        return await engine.create_session()

    @app.post("/v1/sessions/{session_id}/input")
    async def session_input(session_id: str, body: api.SessionInput) -> dict[str, Any]:
        if (body.text is None) == (body.messages is None):
            raise BadRequest("send exactly one of text or messages", param="text")
        msgs = [m.as_template_input() for m in body.messages] if body.messages else None
        return await engine.append_input(session_id, text=body.text, messages=msgs)

    @app.post("/v1/sessions/{session_id}/generate")
    async def session_generate(session_id: str, body: api.SessionGenerate) -> StreamingResponse:
        params = body.sampling(engine.config.ctx_size, max_override=body.max_new_tokens)
        sink = await engine.generate(session_id, params)

        def on_token(text: str, ids: tuple[int, ...]) -> Any:
            return {"text": text, "token_ids": list(ids)}

        def on_done(finish: str | None, st: RequestStats | None) -> list[Any]:
            return [{"done": True, "finish_reason": finish, "usage": api.usage(st, extended=True)}]

        return _stream(sink, on_token, on_done)

    @app.post("/v1/sessions/{session_id}/cancel")
    async def session_cancel(session_id: str) -> dict[str, Any]:
        return await engine.cancel(session_id)

    @app.delete("/v1/sessions/{session_id}")
    async def session_end(session_id: str) -> dict[str, Any]:
        return await engine.end_session(session_id)

    # -- embeddings / reranking ------------------------------------------------------
    @app.post("/v1/embeddings")
    async def embeddings(body: api.EmbeddingRequest) -> dict[str, Any]:
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise BadRequest("input is empty", param="input")
        vecs, n_tokens = await engine.embed(texts)
        return {
            "object": "list",
            "model": name,
            "data": [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)
            ],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }

    async def rerank(body: api.RerankRequest) -> dict[str, Any]:
        if not body.documents:
            raise BadRequest("documents is empty", param="documents")
        scores, n_tokens = await engine.rerank(body.query, body.documents)
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
    return app
