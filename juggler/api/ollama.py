"""Ollama's API as data: its request bodies, and pure translations to and from the
OpenAI bodies Juggler's backends speak. No I/O here; the routes (router/ollama_*.py)
call the manager and the proxy.

What maps where (ollama/ollama docs/api.md):
- `options`: sampling options become OpenAI fields (`num_predict` -> `max_tokens`,
  `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `repeat_penalty`,
  `presence_penalty`, `frequency_penalty`, `stop`); load options become load options
  (`num_ctx` -> `ctx_size`, `num_batch` -> `--batch-size`, `num_thread` ->
  `--threads`, `num_gpu: 0` -> the cpu backend). An option Juggler cannot honour is a
  400 naming it, unless its value is what Juggler does anyway (`mirostat: 0`, ...).
- `keep_alive` (seconds, or a Go duration "5m", "1h30m"): 0 unloads the model once
  idle, a duration is its idle timeout, a negative value keeps it (no idle timeout).
- `format` and `tools` (with tool calls and tool results in `messages`) become OpenAI's
  `response_format` and `tools` (see `ollama_chat`).
- embeddings: `truncate` (default true) and `dimensions` as Ollama defines them (see
  `ollama_embed`).
- Fields Juggler cannot honour (images, think, suffix, template, context, logprobs) are
  refused with 400 when set, saying why, never ignored.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from juggler.api.ollama_chat import Format, Message, format_fields, openai_messages
from juggler.api.openai import MAX_INPUTS, MAX_MESSAGES, capped
from juggler.api.structured import Tool
from juggler.errors import BadRequest, NotImplementedParam

#: The Ollama API version Juggler speaks (clients check /api/version).
API_VERSION = "0.12.0"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Generating(_Body):
    model: StrictStr = Field(min_length=1)
    stream: StrictBool = True
    options: dict[StrictStr, Any] | None = None
    keep_alive: float | StrictStr | None = None
    format: Format = None
    think: StrictBool | StrictStr | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = None


class ChatBody(_Generating):
    messages: Annotated[list[Message] | None, capped(MAX_MESSAGES, "messages")] = None
    tools: list[Tool] | None = Field(None, max_length=128)


class GenerateBody(_Generating):
    prompt: StrictStr | None = None
    suffix: StrictStr | None = None
    system: StrictStr | None = None
    template: StrictStr | None = None
    context: list[int] | None = None
    raw: StrictBool | None = None
    images: list[Any] | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None


class EmbedBody(_Body):
    model: StrictStr = Field(min_length=1)
    input: Annotated[StrictStr | list[StrictStr], capped(MAX_INPUTS, "inputs")]
    truncate: StrictBool | None = None
    options: dict[StrictStr, Any] | None = None
    keep_alive: float | StrictStr | None = None
    dimensions: int | None = Field(None, ge=1)


class EmbeddingsBody(_Body):
    model: StrictStr = Field(min_length=1)
    prompt: StrictStr | None = None
    options: dict[StrictStr, Any] | None = None
    keep_alive: float | StrictStr | None = None


class NameBody(_Body):
    """show / delete: Ollama accepts the model as `model` or (older) `name`."""

    model: StrictStr | None = None
    name: StrictStr | None = None
    verbose: StrictBool | None = None

    def model_name(self) -> str:
        found = self.model or self.name
        if not found:
            raise BadRequest("model is required", param="model")
        return found


class PullBody(NameBody):
    insecure: StrictBool | None = None
    stream: StrictBool = True


class CopyBody(_Body):
    source: StrictStr = Field(min_length=1)
    destination: StrictStr = Field(min_length=1)


class CreateBody(_Body):
    model: StrictStr = Field(min_length=1)
    from_: StrictStr | None = Field(None, alias="from")
    files: dict[StrictStr, StrictStr] | None = None
    parameters: dict[StrictStr, Any] | None = None
    stream: StrictBool = True
    quantize: StrictStr | None = None
    adapters: dict[StrictStr, StrictStr] | None = None
    template: StrictStr | None = None
    license: StrictStr | list[StrictStr] | None = None
    system: StrictStr | None = None
    messages: list[Any] | None = None


def refuse_set(fields: dict[str, Any], why: str) -> None:
    """400 naming the first field that is set (not None, not empty, not False)."""
    for name, value in fields.items():
        if value not in (None, "", [], {}, False, 0):
            raise NotImplementedParam(name, why)


# -- requests ----------------------------------------------------------------------------------
#: Why Juggler refuses what it cannot honour.
NO_VISION = (
    "Juggler serves no vision model (no image projector is loaded), so images cannot be read"
)
NO_THINKING = "Juggler serves no reasoning model, so there is no thinking to turn on or show"


def _refuse_generation_extras(body: _Generating) -> None:
    refuse_set({"think": body.think}, NO_THINKING)
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
        refuse_set({f"messages[{i}].images": m.images}, NO_VISION)
        refuse_set({f"messages[{i}].thinking": m.thinking}, NO_THINKING)
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
    out: dict[str, Any] = {"messages": openai_messages(body.messages or [])}
    if body.tools:
        out["tools"] = [t.model_dump(exclude_none=True) for t in body.tools]
    return {**out, **format_fields(body.format, raw=False)}


def generate_request(body: GenerateBody) -> tuple[str, dict[str, Any]]:
    """(backend path, OpenAI body without sampling) for a non-empty /api/generate."""
    _refuse_generation_extras(body)
    refuse_set({"images": body.images}, NO_VISION)
    refuse_set({"suffix": body.suffix}, "fill-in-the-middle is not built")
    refuse_set(
        {"template": body.template},
        "Juggler renders the model's own chat template (send raw: true with a prompt "
        "formatted your way)",
    )
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
        return "/v1/completions", {
            "prompt": body.prompt or "",
            **format_fields(body.format, raw=True),
        }
    messages = [{"role": "system", "content": body.system}] if body.system else []
    messages.append({"role": "user", "content": body.prompt or ""})
    return "/v1/chat/completions", {
        "messages": messages,
        **format_fields(body.format, raw=False),
    }


def openai_body(model: str, base: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """The backend request: always streamed with usage (the router times the stream)."""
    return {
        **base,
        **sampling,
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# -- responses ---------------------------------------------------------------------------------
def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def iso_at(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).isoformat().replace("+00:00", "Z")


def done_reason(finish: str | None) -> str:
    return "length" if finish == "length" else "stop"


def ollama_name(name: str) -> str:
    """How Ollama writes a model name: with a tag (":latest" by default)."""
    tail = name.rsplit("/", 1)[-1]
    return name if ":" in tail else f"{name}:latest"
