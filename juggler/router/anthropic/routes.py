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
from juggler.router.core.image_fetch import inline_images
from juggler.router.core.modelfile_requests import apply_modelfile
from juggler.router.core.openapi import body_of
from juggler.router.core.relay import read_whole, translated

router = APIRouter()
CHAT_PATH = "/v1/chat/completions"
#: Juggler's engine counts a chat's prompt tokens without running the model.
COUNT_PATH = "/internal/chat_tokens"


async def _forward(
    request: Request, model: str, chat: dict[str, Any], path: str = CHAT_PATH
) -> Response:
    """Send the chat body to the model's backend (a LoRA adapter runs on its base)."""
    state = state_of(request)
    await inline_images(chat, state.settings)  # url image sources, where allowed (issue 51)
    apply_modelfile(state, model, CHAT_PATH, chat)  # a created model's Modelfile (Ollama's)
    target = state.adapters.route(model, chat)
    end = state.adapters.hold(target)
    try:
        return await state.proxy.forward(
            target.model, path, chat, client_request=request, on_release=end
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
    """The prompt's tokens, as the model's chat template and tools make them: Juggler's
    engine renders and tokenizes the prompt, nothing more (issue 52: a count ran a
    whole prefill, 21 s of both cores for 3,830 tokens). A `command` backend has no such
    route: it generates one token, and its usage says how many the prompt took."""
    body = validated(PromptBody, await read_json(request))
    chat = {**prompt_fields(body), "model": body.model, "max_tokens": 1}
    response = await _forward(request, body.model, chat, COUNT_PATH)
    if response.status_code == 404 and _no_route(response):
        response = await _forward(request, body.model, chat)
    if response.status_code != 200:
        raise aa.backend_error(response)
    data = json.loads(bytes(response.body))
    used = data.get("usage") or data
    return {"input_tokens": int(used.get("prompt_tokens") or 0)}


def _no_route(response: Response) -> bool:
    """A 404 of a backend that has no count route (not a model that was not found)."""
    try:
        error = json.loads(bytes(response.body)).get("error")
    except (ValueError, AttributeError):
        return True
    return not isinstance(error, dict) or error.get("code") not in ("model_not_found",)
