"""Ollama's structured outputs and tool calling as the OpenAI fields Juggler's engine
implements (`response_format`, `json_schema`, `tools`, assistant `tool_calls`, `tool`
messages), and the engine's streamed tool calls back as Ollama's. Pure.

Ollama's shapes (ollama/ollama docs/api.md):
- `format`: `"json"` (any JSON object) or a JSON schema object; `""` means text.
- `tools`: `[{"type": "function", "function": {"name", "description", "parameters"}}]`,
  the same shape as OpenAI's.
- A tool call: `{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}`,
  the arguments an object (OpenAI's are a JSON text). Juggler also gives each call its
  `function.index` and an `id`; clients may send both back (most drop them).
- A tool result: `{"role": "tool", "content": "...", "tool_name": "get_weather"}`.
  OpenAI's needs the id of the call it answers: `tool_call_id` when the client sent
  one, else the earliest unanswered call of that name (or the earliest unanswered call).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, StrictInt, StrictStr

from juggler.api import media
from juggler.api.structured import FUNCTION_NAME, Strict
from juggler.errors import BadRequest

#: What Ollama's `format` may hold: "" (text), "json", or a JSON schema.
Format = StrictStr | dict[str, Any] | None


class OllamaFunctionCall(Strict):
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    #: An object, as Ollama sends it (a JSON text, as OpenAI's, is taken too).
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)
    #: Its position among the message's calls (Ollama sends it; order says the same).
    index: StrictInt | None = None


class OllamaToolCall(Strict):
    function: OllamaFunctionCall
    #: The call's id, as Juggler's answers carry it.
    id: StrictStr | None = Field(default=None, max_length=128)
    type: StrictStr | None = Field(default=None, pattern="^function$")


class Message(Strict):
    role: StrictStr
    content: StrictStr | None = None
    images: list[Any] | None = None
    tool_calls: list[OllamaToolCall] | None = Field(None, max_length=128)
    #: A tool result: the function that gave it.
    tool_name: StrictStr | None = None
    #: A tool result: the id of the call it answers (else it answers the earliest open
    #: call of `tool_name`).
    tool_call_id: StrictStr | None = None
    thinking: StrictStr | None = None


# -- requests --------------------------------------------------------------------------------
def format_fields(fmt: Format, *, raw: bool) -> dict[str, Any]:
    """Ollama's `format` as OpenAI fields: `response_format` for a chat, llama.cpp
    server's `json_schema` for a raw completion (which has no response_format)."""
    if fmt is None or fmt == "":
        return {}
    if isinstance(fmt, str):
        if fmt != "json":
            raise BadRequest(
                f'format: {fmt[:40]!r} is neither "json" nor a JSON schema object',
                param="format",
            )
        schema: dict[str, Any] = {"type": "object"}
    else:
        schema = fmt
    if raw:
        return {"json_schema": schema}
    return {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}


def ollama_param(text: str) -> str:
    """An error text that names an OpenAI field, naming Ollama's instead."""
    for prefix in ("response_format.json_schema.schema", "response_format", "json_schema"):
        if text.startswith(prefix):
            return "format" + text[len(prefix) :]
    return text


def _arguments_text(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Ollama messages as OpenAI chat messages, one for one (images are the caller's to
    refuse); an assistant's `thinking` is its `reasoning_content`."""
    pending: list[tuple[str, str]] = []  # (call id, name) not yet answered, in order
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        msg: dict[str, Any] = {"role": m.role, "content": with_images(m.content, m.images)}
        if m.thinking and m.role == "assistant":
            msg["reasoning_content"] = m.thinking
        calls = m.tool_calls or []
        if calls:
            msg["tool_calls"] = []
            for j, c in enumerate(calls):
                call_id = c.id or f"call_{i}_{j}"
                pending.append((call_id, c.function.name))
                msg["tool_calls"].append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": _arguments_text(c.function.arguments),
                        },
                    }
                )
        if m.role == "tool":
            answers = m.tool_call_id or _answered(pending, m.tool_name)
            if answers:
                msg["tool_call_id"] = answers
                pending = [p for p in pending if p[0] != answers]
            if m.tool_name:
                msg["name"] = m.tool_name
        out.append(msg)
    return out


def with_images(text: str | None, images: list[Any] | None) -> Any:
    """A message's content: its text, after its images (base64, as Ollama sends them)
    as OpenAI image parts when it has any (issue 51)."""
    if not images:
        return text or ""
    for j, img in enumerate(images):
        if not isinstance(img, str) or not img:
            raise BadRequest(f"images[{j}]: an image is a base64 string", param="images")
    parts: list[dict[str, Any]] = [media.image_part(media.from_base64(i)) for i in images]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def _answered(pending: list[tuple[str, str]], name: str | None) -> str | None:
    for call_id, call_name in pending:
        if name is None or call_name == name:
            return call_id
    return pending[0][0] if pending else None


# -- responses -------------------------------------------------------------------------------
@dataclass
class _Call:
    call_id: str
    name: str
    arguments: str = ""


@dataclass
class ToolCalls:
    """The engine's streamed OpenAI `tool_calls` deltas, gathered into whole Ollama tool
    calls: a call is whole when the next one starts or the generation ends. One per
    answer; `feed` and `finish` return the calls that just became whole."""

    calls: list[_Call] = field(default_factory=list)
    #: Calls already handed out.
    num_done: int = 0
    #: The text of calls cut short (their arguments do not parse): the answer's content.
    leftover: str = ""

    def feed(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for d in deltas:
            fn = d.get("function") or {}
            index = int(d.get("index", len(self.calls)))
            if index >= len(self.calls):
                self.calls.append(_Call(str(d.get("id") or ""), str(fn.get("name") or "")))
            self.calls[index].arguments += str(fn.get("arguments") or "")
        return self._whole(len(self.calls) - 1)

    def finish(self) -> list[dict[str, Any]]:
        return self._whole(len(self.calls))

    def _whole(self, upto: int) -> list[dict[str, Any]]:
        out = []
        for index in range(self.num_done, max(upto, self.num_done)):
            call = self.calls[index]
            try:  # a whole call always has its arguments (the grammar says so)
                arguments = json.loads(call.arguments)
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                fn = {"index": index, "name": call.name, "arguments": arguments}
                out.append({"id": call.call_id, "function": fn})
            else:  # cut short by the token limit: it stays text
                name = json.dumps(call.name, ensure_ascii=False)
                self.leftover += f'{{"name": {name}, "arguments": {call.arguments}'
        self.num_done = max(upto, self.num_done)
        return out
