"""A created model's Modelfile (`core/modelfiles.ModelDefaults`) applied to an Ollama request, as
Ollama's chat and generate handlers apply it. Pure.

- PARAMETERs are the model's options, under the request's (`options` wins per name);
- /api/chat: the MESSAGEs come before the request's messages, and the SYSTEM first
  unless the request starts with a system message of its own;
- /api/generate: the request's `system`, else the SYSTEM; then the MESSAGEs; then the
  prompt (`raw: true` takes none of them: the prompt is sent as it is);
- TEMPLATE (or /api/generate's `template`): the chat is rendered to prompt text by
  `prompt_template` and sent as a completion, instead of through the model's own chat
  template; `format` then becomes llama.cpp's `json_schema`. Tools are refused with such
  a template (its tool format would have to be parsed out of the answer).
"""

from __future__ import annotations

from typing import Any

from juggler.router.core.modelfiles import ModelDefaults
from juggler.router.core.prompt_template import template_prompt
from juggler.router.ollama.messages import Message
from juggler.router.ollama.wire import ChatBody, GenerateBody

CHAT_PATH = "/v1/chat/completions"
COMPLETION_PATH = "/v1/completions"


def with_options(defaults: ModelDefaults, options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The model's PARAMETERs under the request's options."""
    sampling = defaults.sampling()
    if not sampling:
        return options
    return {**sampling, **(options or {})}


def chat_body(defaults: ModelDefaults, body: ChatBody) -> ChatBody:
    """/api/chat with the model's options, MESSAGEs and SYSTEM (a load-only request, with
    no messages, gets the options only)."""
    update: dict[str, Any] = {"options": with_options(defaults, body.options)}
    if body.messages:
        history = [Message.model_validate(m) for m in defaults.messages]
        messages = [*history, *body.messages]
        if defaults.system and body.messages[0].role != "system":
            messages.insert(
                0, Message.model_validate({"role": "system", "content": defaults.system})
            )
        update["messages"] = messages
    return body.model_copy(update=update)


def generate_body(defaults: ModelDefaults, body: GenerateBody) -> GenerateBody:
    """/api/generate with the model's options (its SYSTEM and MESSAGEs: `generate_base`)."""
    return body.model_copy(update={"options": with_options(defaults, body.options)})


def generate_base(
    defaults: ModelDefaults, body: GenerateBody, path: str, base: dict[str, Any]
) -> dict[str, Any]:
    """`request.generate_request`'s chat with the request's system or the SYSTEM, and the
    MESSAGEs before the prompt; a raw completion unchanged."""
    if path != CHAT_PATH:
        return base
    system = body.system or defaults.system
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages += [dict(m) for m in defaults.messages]
    messages += [m for m in base["messages"] if m["role"] != "system"]
    return {**base, "messages": messages}


def templated(template: str, path: str, base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(path, body) with the chat in `base` rendered through `template` to a completion's
    prompt; a completion (raw) is left as it is."""
    if path != CHAT_PATH:
        return path, base
    prompt = template_prompt(template, base["messages"], base.get("tools"))
    out = {k: v for k, v in base.items() if k not in ("messages", "response_format")}
    fmt = base.get("response_format")
    if fmt is not None:
        out["json_schema"] = fmt["json_schema"]["schema"]
    return COMPLETION_PATH, {**out, "prompt": prompt}
