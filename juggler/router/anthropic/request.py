"""Anthropic's Messages API requests as the OpenAI chat body every Juggler backend speaks:
the canonical request that Ollama's /api/chat becomes as well. Pure; the routes
(`routes`) send it to the model's backend, and `answer` words what comes back.

What maps where:
- `system` (a string or text blocks) is the first system message; `messages` keep their
  order, consecutive turns of one role are one turn (as Anthropic combines them), and a
  turn's text blocks are joined by a blank line.
- `tool_use` blocks of an assistant turn are its `tool_calls` (`input` as the arguments'
  JSON text); each `tool_result` block of a user turn is a `tool` message answering
  `tool_use_id`, which must name an earlier `tool_use` (`is_error: true` prefixes its
  text with "Error: ").
- `tools` (`name`, `description`, `input_schema`) are function tools; `tool_choice`
  auto / any / tool / none is OpenAI's auto / required / named / none, and
  `disable_parallel_tool_use` is `parallel_tool_calls: false`.
- `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k` sample as OpenAI's
  fields of those names (`stop` for the sequences); `output_config.format` (a JSON
  schema) is `response_format`.
- `thinking` ({"type": "enabled", "budget_tokens": N}, "adaptive" or "disabled"; unset
  is disabled, as Anthropic's default) turns a reasoning model's thinking on or off
  (`request_thinking`); an assistant turn's `thinking` blocks are its
  `reasoning_content`, which the chat template keeps or drops.
- `metadata.user_id`, `service_tier`, `speed: "standard"` and `cache_control` (Juggler's
  prefix cache keeps every prompt's KV anyway) ask for what Juggler does: accepted. What
  it cannot honour (images, documents, redacted thinking, server tools, a final
  assistant turn to continue, ...) is a 400 naming it and saying why.
"""

from __future__ import annotations

import json
from typing import Any

from juggler.errors import BadRequest, NotImplementedParam
from juggler.router.anthropic.images import image_part_of, joined
from juggler.router.anthropic.thinking import request_thinking, thinking_text
from juggler.router.anthropic.wire import (
    AnthropicMessage,
    AnthropicTextBlock,
    AnthropicTool,
    AnthropicToolResult,
    AnthropicToolUse,
    MessagesRequest,
    PromptBody,
    ServerTool,
    ToolChoiceAuto,
    ToolChoiceNone,
    ToolChoiceTool,
)

NO_REDACTED = "Juggler writes no redacted thinking, so there is none to send back"
NO_SERVER_TOOLS = "Juggler runs client tools only (no server tools)"
#: Why a content block of each type is refused.
REFUSED_BLOCKS = {
    "document": "documents are not read (no vision model, no PDF text extraction)",
    "redacted_thinking": NO_REDACTED,
    "search_result": "search results with citations are not built",
    "container_upload": "containers are not built",
}


def _refuse_if(param: str, value: Any, why: str, neutral: tuple[Any, ...] = (None,)) -> None:
    if value not in neutral:
        raise NotImplementedParam(param, why)


def _block_text(blocks: str | list[Any], where: str) -> str:
    """Text blocks (or a string) as one text; any other block is refused by name."""
    if isinstance(blocks, str):
        return blocks
    texts = []
    for j, b in enumerate(blocks):
        if not isinstance(b, AnthropicTextBlock):
            _refuse_block(f"{where}.{j}", b)
        texts.append(b.text)
    return "\n\n".join(texts)


def _refuse_block(param: str, block: Any) -> None:
    kind = str(getattr(block, "type", "?"))
    if kind in ("tool_use", "tool_result"):
        where = "assistant" if kind == "tool_use" else "user"
        raise BadRequest(f"{param}: {kind} blocks belong in {where} turns", param=param)
    why = REFUSED_BLOCKS.get(kind, "not built")
    raise NotImplementedParam(param, f"{kind} blocks: {why}")


def _turns(messages: list[AnthropicMessage]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Consecutive messages of one role as one turn: (role, [(param, block), ...])."""
    turns: list[tuple[str, list[tuple[str, Any]]]] = []
    for i, m in enumerate(messages):
        blocks: list[tuple[str, Any]]
        if isinstance(m.content, str):
            # A string content is one text block, already validated (an empty string
            # stays what it was; only an empty text block is refused).
            text = AnthropicTextBlock.model_construct(type="text", text=m.content)
            blocks = [(f"messages.{i}.content", text)]
        else:
            blocks = [(f"messages.{i}.content.{j}", b) for j, b in enumerate(m.content)]
        if turns and turns[-1][0] == m.role and m.role != "system":
            turns[-1][1].extend(blocks)
        else:
            turns.append((m.role, blocks))
    return turns


def chat_messages(
    system: str | list[AnthropicTextBlock] | None, messages: list[AnthropicMessage]
) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": _block_text(system, "system")})
    calls: dict[str, str] = {}  # tool_use id -> name, for the results that answer them
    turns = _turns(messages)
    for role, blocks in turns:
        texts: list[Any] = []  # text, and a user's images as OpenAI parts (issue 51)
        thoughts: list[str] = []
        tool_calls: list[dict[str, Any]] = []
        for param, b in blocks:
            if isinstance(b, AnthropicTextBlock):
                texts.append(b.text)
            elif role == "assistant" and (thought := thinking_text(param, b)) is not None:
                thoughts.append(thought)
            elif isinstance(b, AnthropicToolUse) and role == "assistant":
                calls[b.id] = b.name
                arguments = json.dumps(b.input, ensure_ascii=False)
                fn = {"name": b.name, "arguments": arguments}
                tool_calls.append({"id": b.id, "type": "function", "function": fn})
            elif getattr(b, "type", None) == "image" and role == "user":
                texts.append(image_part_of(param, b))
            elif isinstance(b, AnthropicToolResult) and role == "user":
                if texts:  # text before a result stays before it
                    out.append({"role": "user", "content": joined(texts)})
                    texts = []
                out.append(_tool_message(param, b, calls))
            else:
                _refuse_block(param, b)
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
            if thoughts:
                msg["reasoning_content"] = "\n\n".join(thoughts)
            if tool_calls:
                msg["tool_calls"] = tool_calls
            out.append(msg)
        elif texts or role == "system":
            out.append({"role": role, "content": joined(texts)})
    if turns[-1][0] == "assistant":
        raise NotImplementedParam(
            f"messages.{len(messages) - 1}",
            "a final assistant turn (prefill) is not continued; end with a user turn",
        )
    return out


def _tool_message(param: str, b: AnthropicToolResult, calls: dict[str, str]) -> dict[str, Any]:
    if b.tool_use_id not in calls:
        raise BadRequest(
            f"{param}.tool_use_id: no tool_use block with id {b.tool_use_id!r} comes before it",
            param=f"{param}.tool_use_id",
        )
    text = _block_text(b.content, f"{param}.content")
    if b.is_error:
        text = f"Error: {text}"
    name = calls[b.tool_use_id]
    return {"role": "tool", "tool_call_id": b.tool_use_id, "name": name, "content": text}


def _tools(tools: list[AnthropicTool | ServerTool]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tools):
        at = f"tools.{i}"
        if isinstance(t, ServerTool):
            raise NotImplementedParam(f"{at}.type", f"{t.type}: {NO_SERVER_TOOLS}")
        _refuse_if(f"{at}.defer_loading", t.defer_loading, "there is no tool search", (None, False))
        _refuse_if(
            f"{at}.eager_input_streaming",
            t.eager_input_streaming,
            "tool input always streams as it is generated",
            (None, True),
        )
        _refuse_if(f"{at}.input_examples", t.input_examples, "not built", (None, []))
        if t.allowed_callers not in (None, ["direct"]):
            raise NotImplementedParam(f"{at}.allowed_callers", "only direct calls (no code tools)")
        fn: dict[str, Any] = {"name": t.name, "parameters": t.input_schema}
        if t.description is not None:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any, names: list[str]) -> dict[str, Any]:
    if choice is None:
        return {}
    if isinstance(choice, ToolChoiceNone):
        return {"tool_choice": "none"} if names else {}
    if not names:
        raise BadRequest("tool_choice: needs tools", param="tool_choice")
    out: dict[str, Any] = {}
    if isinstance(choice, ToolChoiceTool):
        if choice.name not in names:
            raise BadRequest(
                f"tool_choice.name: no tool named {choice.name!r}", param="tool_choice.name"
            )
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        out["tool_choice"] = "auto" if isinstance(choice, ToolChoiceAuto) else "required"
    if choice.disable_parallel_tool_use:
        out["parallel_tool_calls"] = False
    return out


def prompt_fields(body: PromptBody) -> dict[str, Any]:
    """The OpenAI chat fields of a prompt: messages, tools, tool_choice, response_format."""
    _refuse_if("speed", body.speed, "Juggler has no fast mode", (None, "standard"))
    out: dict[str, Any] = {
        "messages": chat_messages(body.system, body.messages),
        **request_thinking(body.thinking, getattr(body, "max_tokens", None)),
    }
    tools = _tools(body.tools or [])
    if tools:
        out["tools"] = tools
    out.update(_tool_choice(body.tool_choice, [t["function"]["name"] for t in tools]))
    config = body.output_config
    if config is not None:
        _refuse_if("output_config.effort", config.effort, "there is no effort to set")
        if config.format is not None:
            schema = {"schema": config.format.schema_}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
    return out


def chat_body(body: MessagesRequest) -> dict[str, Any]:
    """The OpenAI chat body of a Messages request (without model and streaming)."""
    _refuse_if("container", body.container, "containers (code execution) are not built")
    _refuse_if("inference_geo", body.inference_geo, "Juggler runs where it runs")
    _refuse_if("diagnostics", body.diagnostics, "there is no prompt-cache diagnosis")
    out = prompt_fields(body)
    out["max_tokens"] = body.max_tokens
    if body.stop_sequences:
        out["stop"] = list(body.stop_sequences)
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(body, name)
        if value is not None:
            out[name] = value
    return out


#: OpenAI field -> the Anthropic field it came from, for the backend's error messages.
PARAMS = (
    ("response_format.json_schema.schema", "output_config.format.schema"),
    ("response_format", "output_config.format"),
    ("stop", "stop_sequences"),
)


def anthropic_param(text: str) -> str:
    """An error text (or param) naming an OpenAI field, naming Anthropic's instead."""
    for openai_name, ours in PARAMS:
        rest = text[len(openai_name) :]
        if text.startswith(openai_name) and rest[:1] in ("", ".", ":", "["):
            return ours + rest
    if text.startswith("tools.") and ".function.parameters" in text:
        return text.replace(".function.parameters", ".input_schema", 1)
    return text
