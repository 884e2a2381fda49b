"""Chat templates: the GGUF's own Jinja template, or a fallback chosen by architecture.

Rendering is pure string work (jinja2 in a sandbox), callable from any thread. Sessions
render *incrementally*: `ChatState` remembers the text its sequence already holds, so a
delta of new messages renders the whole history once more but only the new suffix is
tokenized and prefilled. When a template does not extend its earlier output (some
templates rewrite earlier turns) `delta_for()` reports no clean suffix and the caller
falls back to a token-level diff.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

log = logging.getLogger(__name__)

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

GEMMA = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

#: Fallback templates by `general.architecture` for GGUFs that carry none.
FALLBACKS: dict[str, str] = {
    "gemma": GEMMA,
    "gemma2": GEMMA,
    "gemma3": GEMMA,
    "gemma3n": GEMMA,
    "llama": LLAMA3,
}


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may reference."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str, origin: str) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined
        )
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        self._template = env.from_string(source)
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin

    @classmethod
    def choose(
        cls, gguf_template: str | None, architecture: str, *, bos_token: str, eos_token: str
    ) -> ChatTemplate:
        """The GGUF's template, else the fallback for the architecture, else ChatML."""
        if gguf_template:
            return cls(gguf_template, bos_token=bos_token, eos_token=eos_token, origin="gguf")
        source = FALLBACKS.get(architecture, CHATML)
        name = "chatml" if source is CHATML else f"{architecture} fallback"
        log.warning("model has no chat template; using the %s template", name)
        return cls(source, bos_token=bos_token, eos_token=eos_token, origin=name)

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
        variables: dict[str, Any] | None = None,
    ) -> str:
        """The prompt text; `tools` (OpenAI's function tools) only for templates that
        render tools themselves (see `structured.tools`); `variables`: more template
        variables (a request's chat_template_kwargs, `enable_thinking`)."""
        extra = {**(variables or {}), **({"tools": tools} if tools is not None else {})}
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            **extra,
        )

    def generation_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """What `add_generation_prompt` appends after these messages (e.g. the
        assistant header); empty if the template does not extend its output."""
        without = self.render(messages, add_generation_prompt=False, tools=tools)
        with_prompt = self.render(messages, add_generation_prompt=True, tools=tools)
        return with_prompt[len(without) :] if with_prompt.startswith(without) else ""


@dataclass
class ChatState:
    """A chat session's history and the exact text its sequence holds (worker-owned)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    #: The text that the sequence's tokens (in KV and pending) spell, as rendered.
    text: str = ""
    #: The tools the template renders (templates that render tools themselves).
    tools: list[dict[str, Any]] | None = None
    #: What follows the generation prompt (a reasoning model's empty thinking, when off).
    header_suffix: str = ""

    def delta_for(self, template: ChatTemplate, new: list[dict[str, Any]]) -> str | None:
        """The text to append for new messages, or None if the template's rendering of
        the longer history does not start with what the sequence already holds."""
        full = self.full_text(template, new)
        if full.startswith(self.text):
            return full[len(self.text) :]
        return None

    def full_text(self, template: ChatTemplate, new: list[dict[str, Any]]) -> str:
        messages = [*self.messages, *new]
        return template.render(messages, add_generation_prompt=False, tools=self.tools)
