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
- Fields with no Juggler meaning (images, tools, format, think, suffix, template,
  context, logprobs) are refused with 400 when set, never ignored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from juggler.errors import BadRequest, NotImplementedParam

#: The Ollama API version Juggler speaks (clients check /api/version).
API_VERSION = "0.12.0"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(_Body):
    role: StrictStr
    content: StrictStr | None = None
    images: list[Any] | None = None
    tool_calls: list[Any] | None = None
    tool_name: StrictStr | None = None
    thinking: StrictStr | None = None


class _Generating(_Body):
    model: StrictStr = Field(min_length=1)
    stream: StrictBool = True
    options: dict[StrictStr, Any] | None = None
    keep_alive: float | StrictStr | None = None
    format: Any = None
    think: StrictBool | StrictStr | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = None


class ChatBody(_Generating):
    messages: list[Message] | None = None
    tools: list[Any] | None = None


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
    input: StrictStr | list[StrictStr]
    truncate: StrictBool | None = None
    options: dict[StrictStr, Any] | None = None
    keep_alive: float | StrictStr | None = None
    dimensions: int | None = None


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
def _refuse_generation_extras(body: _Generating) -> None:
    refuse_set(
        {
            "format": body.format,
            "think": body.think,
            "logprobs": body.logprobs,
            "top_logprobs": body.top_logprobs,
        },
        "not supported by Juggler's engine",
    )


def chat_messages(body: ChatBody) -> list[dict[str, str]]:
    _refuse_generation_extras(body)
    refuse_set({"tools": body.tools}, "tool calling is not supported through /api/chat")
    out = []
    for i, m in enumerate(body.messages or []):
        refuse_set(
            {
                f"messages[{i}].images": m.images,
                f"messages[{i}].tool_calls": m.tool_calls,
                f"messages[{i}].tool_name": m.tool_name,
                f"messages[{i}].thinking": m.thinking,
            },
            "only text messages are supported",
        )
        out.append({"role": m.role, "content": m.content or ""})
    return out


def generate_request(body: GenerateBody) -> tuple[str, dict[str, Any]]:
    """(backend path, OpenAI body without sampling) for a non-empty /api/generate."""
    _refuse_generation_extras(body)
    refuse_set(
        {
            "suffix": body.suffix,
            "template": body.template,
            "context": body.context,
            "images": body.images,
            "width": body.width,
            "height": body.height,
            "steps": body.steps,
        },
        "not supported by Juggler",
    )
    if body.raw:
        if body.system:
            raise BadRequest("system cannot be used with raw", param="system")
        return "/v1/completions", {"prompt": body.prompt or ""}
    messages = [{"role": "system", "content": body.system}] if body.system else []
    messages.append({"role": "user", "content": body.prompt or ""})
    return "/v1/chat/completions", {"messages": messages}


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
