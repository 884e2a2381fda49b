"""What a chat template does with thinking (probed once, when the engine starts), and
what one request asks of it (`think_plan`).

A template reasons when it speaks of thinking: `<think>`, `enable_thinking` or
`reasoning_content` (Qwen3, DeepSeek-R1, QwQ, SmolLM3 ...). Thinking is turned off the
way the model expects: the template variable `enable_thinking` false where the template
reads it (Qwen3 then writes an empty `<think>\\n\\n</think>` block itself), else Juggler
writes that empty block after the generation prompt.

gpt-oss's harmony template (`<|channel|>analysis` ... `final`) reasons too: its thinking is
the analysis channel (`harmony.py`). It takes `reasoning_effort` ("low", "medium",
"high") as a template variable and cannot stop thinking: turning thinking off
(`enable_thinking` false, effort "none") asks for the least, "low", as "minimal" does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from juggler.engine.llama.chat import ChatTemplate
from juggler.errors import BadRequest
from juggler.reasoning import template_harmony, template_reasons

#: Variables the engine gives every template itself: chat_template_kwargs may not set them.
RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
#: The empty thinking that turns thinking off for a template without `enable_thinking`.
EMPTY_THINKING = "<think>\n\n</think>\n\n"

Effort = Literal["none", "minimal", "low", "medium", "high"]


@dataclass(frozen=True)
class ThinkCaps:
    """What the model's template does with thinking."""

    reasons: bool = False
    #: It reads the variable `enable_thinking`.
    toggle: bool = False
    #: Its generation prompt ends inside an open `<think>` (DeepSeek-R1's templates).
    opens: bool = False
    #: gpt-oss's harmony channels.
    harmony: bool = False


def think_caps(template: ChatTemplate) -> ThinkCaps:
    source = template.source
    if template_harmony(source):
        return ThinkCaps(reasons=True, harmony=True)
    if not template_reasons(source):
        return ThinkCaps()
    try:
        prompt = template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    except Exception:  # a template may raise on anything it does not expect
        prompt = ""
    return ThinkCaps(
        reasons=True,
        toggle="enable_thinking" in source,
        opens=prompt.rstrip().endswith("<think>"),
    )


@dataclass(frozen=True)
class ThinkPlan:
    """One request's thinking: on or off, the template variables, what follows the
    generation prompt, and whether the output starts inside the thinking."""

    reasons: bool = False
    on: bool = False
    variables: dict[str, Any] = field(default_factory=dict)
    suffix: str = ""
    inside: bool = False
    #: Split the thinking from the answer (llama-server's reasoning_format other than none).
    split: bool = True
    #: The thinking is harmony's analysis channel (gpt-oss).
    harmony: bool = False


def _wanted(
    kwargs: dict[str, Any] | None, effort: Effort | None, default: bool | None
) -> tuple[bool | None, str]:
    """Thinking asked on or off (None: the template's default), and by which field."""
    flag = (kwargs or {}).get("enable_thinking")
    if flag is not None:
        if not isinstance(flag, bool):
            raise BadRequest(
                "chat_template_kwargs.enable_thinking: expected true or false",
                param="chat_template_kwargs.enable_thinking",
            )
        return flag, "chat_template_kwargs.enable_thinking"
    if effort is not None:
        return effort != "none", "reasoning_effort"
    return default, ""


def think_plan(
    caps: ThinkCaps,
    model: str,
    *,
    kwargs: dict[str, Any] | None = None,
    effort: Effort | None = None,
    default: bool | None = None,
    split: bool = True,
) -> ThinkPlan:
    """The plan for a request's `chat_template_kwargs` and `reasoning_effort` (`default`:
    the model's, from `--reasoning-budget`). Thinking asked of a model that cannot think
    is a 400 (Ollama's "does not support thinking"); asked off, it changes nothing."""
    bad = sorted(RESERVED & set(kwargs or {}))
    if bad:
        raise BadRequest(
            f"chat_template_kwargs.{bad[0]}: the engine sets this template variable itself",
            param=f"chat_template_kwargs.{bad[0]}",
        )
    variables = dict(kwargs or {})
    on, source = _wanted(kwargs, effort, default)
    if not caps.reasons:
        if on and source:
            raise BadRequest(f'"{model}" does not support thinking', param=source)
        return ThinkPlan(variables=variables)
    if caps.harmony:
        return _harmony_plan(variables, on, effort, split)
    if effort is not None:
        variables.setdefault("reasoning_effort", effort)
    if on is False:
        if caps.toggle:
            variables["enable_thinking"] = False
            return ThinkPlan(reasons=True, on=False, variables=variables, split=split)
        suffix = "\n</think>\n\n" if caps.opens else EMPTY_THINKING
        return ThinkPlan(reasons=True, on=False, variables=variables, suffix=suffix, split=split)
    if on and caps.toggle:
        variables["enable_thinking"] = True
    return ThinkPlan(reasons=True, on=True, variables=variables, inside=caps.opens, split=split)


def _harmony_plan(
    variables: dict[str, Any], on: bool | None, effort: Effort | None, split: bool
) -> ThinkPlan:
    """gpt-oss's effort is its template's `reasoning_effort`; it always thinks, so off
    (and "minimal") asks for the least, "low"."""
    if effort in ("none", "minimal") or on is False:
        variables["reasoning_effort"] = "low"
    elif effort is not None:
        variables.setdefault("reasoning_effort", effort)
    return ThinkPlan(reasons=True, on=True, variables=variables, split=split, harmony=True)


def request_plan(
    caps: ThinkCaps,
    model: str,
    *,
    budget: int,
    fmt: str,
    kwargs: dict[str, Any] | None,
    effort: Effort | None,
    request_fmt: str | None = None,
) -> ThinkPlan:
    """`think_plan` under the model's flags (`--reasoning-budget`, `--reasoning-format`)
    and the request's own `reasoning_format`."""
    split = (request_fmt or fmt) != "none"
    default = False if budget == 0 else None
    return think_plan(caps, model, kwargs=kwargs, effort=effort, default=default, split=split)


NO_THINK = ThinkPlan()
