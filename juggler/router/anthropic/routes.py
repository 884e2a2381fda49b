"""Anthropic's Messages API: `POST /v1/messages` (streaming or not) and `POST
/v1/messages/count_tokens`, under both /v1 and /api/v1.

A thin dialect, as Ollama's: the body is validated (`wire`) and turned into the OpenAI
chat body every backend speaks (`request`); the model is found as the OpenAI routes find
it (a catalog model, auto-loaded; a LoRA adapter runs on its base model); the backend is
always asked to stream with usage, and the router translates its chunks (`answer`).
Errors take Anthropic's shape (`wire.error_body`, which the app registers for these
paths).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from juggler.api.streams import ClosingStreamingResponse
from juggler.router.anthropic import answer as aa
from juggler.router.anthropic.request import chat_body, prompt_fields
from juggler.router.anthropic.wire import MessagesRequest, PromptBody, validated
from juggler.router.core.bodies import read_json
from juggler.router.core.deps import state_of
from juggler.router.core.openapi import body_of
from juggler.router.core.relay import read_whole, translated

router = APIRouter()
CHAT_PATH = "/v1/chat/completions"


async def _forward(request: Request, model: str, chat: dict[str, Any]) -> Response:
    """Send the chat body to the model's backend (a LoRA adapter runs on its base)."""
    state = state_of(request)
    target = state.adapters.route(model, chat)
    end = state.adapters.hold(target)
    try:
        return await state.proxy.forward(
            target.model, CHAT_PATH, chat, client_request=request, on_release=end
        )
    except BaseException:
        end()
        raise


@router.post("/messages", openapi_extra=body_of(MessagesRequest))
async def messages(request: Request) -> Response:
    body = validated(MessagesRequest, await read_json(request))
    chat = {
        **chat_body(body),
        "model": body.model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = await _forward(request, body.model, chat)
    if not isinstance(response, StreamingResponse):
        raise aa.backend_error(response)
    answer = aa.MessageEvents(body.model, body.max_tokens)
    if body.stream:
        stream = translated(response, lambda events: aa.sse_events(aa.events_of(answer, events)))
        return ClosingStreamingResponse(
            stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    message = await read_whole(
        response, lambda events: aa.whole(aa.events_of(answer, events), request)
    )
    return JSONResponse(message)


@router.post("/messages/count_tokens", openapi_extra=body_of(PromptBody))
async def count_tokens(request: Request) -> dict[str, int]:
    """The prompt's tokens, as the model's chat template and tools make them: the backend
    renders the prompt and generates one token (the prompt's KV stays in its prefix cache,
    so the request that follows does not compute it again)."""
    body = validated(PromptBody, await read_json(request))
    chat = {**prompt_fields(body), "model": body.model, "max_tokens": 1}
    response = await _forward(request, body.model, chat)
    if response.status_code != 200:
        raise aa.backend_error(response)
    used = json.loads(bytes(response.body)).get("usage") or {}
    return {"input_tokens": int(used.get("prompt_tokens") or 0)}
