"""An Ollama request as the canonical request every face makes: the OpenAI body every
backend speaks, and its per-request options, read once (the adapter's way in; `answer`
is its way out). Pure; the routes (`routes`) send the body to the model's backend.

What maps where (ollama/ollama docs/api.md):
- `/api/chat`'s `messages` (tool calls and tool results included), `format` and `tools`
  are OpenAI's `messages`, `response_format` and `tools` (see `messages`);
  `/api/generate`'s `system` and `prompt` are a chat, or with `raw: true` a completion;
- `options` and `keep_alive` are one `OllamaRequestOptions` (see `options`): its
  sampling options join the OpenAI body, its load options and keep_alive are the
  model's (`residency`);
- embeddings: `truncate` and `dimensions` as Ollama defines them (`embed_rules`);
- `template` (a Go template, as a Modelfile's TEMPLATE) is rendered by the route
  (`applied.templated`);
- `think` and earlier turns' `thinking` are the OpenAI body's thinking fields (`thinking`);
- what Juggler cannot honour (suffix, context, logprobs) is a 400
  naming it, never ignored.
"""

from __future__ import annotations

from typing import Any

from juggler.errors import BadRequest, NotImplementedParam
from juggler.router.ollama.messages import format_fields, openai_messages, with_images
from juggler.router.ollama.options import OllamaRequestOptions
from juggler.router.ollama.thinking import think_fields
from juggler.router.ollama.wire import (
    ChatBody,
    EmbedBody,
    EmbeddingsBody,
    GenerateBody,
    refuse_set,
)


def request_options(
    body: ChatBody | GenerateBody | EmbedBody | EmbeddingsBody,
) -> OllamaRequestOptions:
    """The request's `options` and `keep_alive`, read once: a 400 naming an option Juggler
    cannot honour, or a keep_alive that is no duration."""
    return OllamaRequestOptions.read(body.options, body.keep_alive)


def _refuse_generation_extras(body: ChatBody | GenerateBody) -> None:
    refuse_set(
        {"logprobs": body.logprobs, "top_logprobs": body.top_logprobs},
        "not built on Ollama's routes (chat completions under /v1 have logprobs)",
    )


def chat_request(body: ChatBody) -> dict[str, Any]:
    """The OpenAI chat body (without sampling) of a non-empty /api/chat: messages, and
    tools or a response format."""
    _refuse_generation_extras(body)
    if body.tools and body.format not in (None, ""):
        raise NotImplementedParam(
            "format", "with tools: a model either calls tools or answers in a format"
        )
    for i, m in enumerate(body.messages or []):
        if m.thinking and m.role != "assistant":
            raise BadRequest(
                f"messages[{i}].thinking: only assistant messages think",
                param=f"messages[{i}].thinking",
            )
        if m.role != "tool" and (m.tool_name or m.tool_call_id):
            field = "tool_name" if m.tool_name else "tool_call_id"
            raise BadRequest(
                f"messages[{i}].{field}: only tool messages answer a tool call",
                param=f"messages[{i}].{field}",
            )
        if m.tool_calls and m.role != "assistant":
            raise BadRequest(
                f"messages[{i}].tool_calls: only assistant messages call tools",
                param=f"messages[{i}].tool_calls",
            )
    out: dict[str, Any] = {
        "messages": openai_messages(body.messages or []),
        **think_fields(body.think),
    }
    if body.tools:
        out["tools"] = [t.model_dump(exclude_none=True) for t in body.tools]
    return {**out, **format_fields(body.format, raw=False)}


def generate_request(body: GenerateBody) -> tuple[str, dict[str, Any]]:
    """(backend path, OpenAI body without sampling) for a non-empty /api/generate."""
    _refuse_generation_extras(body)
    if body.raw:
        refuse_set({"images": body.images}, "raw prompts take text only; send images without raw")
    refuse_set({"suffix": body.suffix}, "fill-in-the-middle is not built")
    refuse_set(
        {"context": body.context},
        "Juggler keeps no token contexts; send the conversation as /api/chat messages",
    )
    refuse_set(
        {"width": body.width, "height": body.height, "steps": body.steps},
        "image generation is not built",
    )
    if body.raw:
        if body.system:
            raise BadRequest("system cannot be used with raw", param="system")
        if body.template:
            raise BadRequest("template cannot be used with raw", param="template")
        think_fields(body.think, raw=True)
        return "/v1/completions", {
            "prompt": body.prompt or "",
            **format_fields(body.format, raw=True),
        }
    messages = [{"role": "system", "content": body.system}] if body.system else []
    messages.append({"role": "user", "content": with_images(body.prompt, body.images)})
    return "/v1/chat/completions", {
        "messages": messages,
        **think_fields(body.think),
        **format_fields(body.format, raw=False),
    }


def openai_body(model: str, base: dict[str, Any], options: OllamaRequestOptions) -> dict[str, Any]:
    """The backend request: `base` with the request's sampling options, always streamed
    with usage (the router times the stream)."""
    return {
        **base,
        **options.sampling,
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
