"""Anthropic's extended thinking as the OpenAI body's thinking fields (Anthropic's
"Building with extended thinking"). Pure.

- `thinking: {"type": "enabled", "budget_tokens": N}` (N at least 1024 and under
  `max_tokens`, as Anthropic checks) or `{"type": "adaptive"}` turn a reasoning model's
  thinking on; `{"type": "disabled"}`, or no `thinking`, off (Anthropic's default). The
  budget is counted apart (`thinking_budget_tokens`, engine/thinking/budget): once the
  model has thought that many tokens, its thinking is closed for it and the answer
  follows; `max_tokens` bounds thinking and answer together.
- A model that cannot think answers "enabled" with the backend's 400 (`"<model>" does
  not support thinking`); "disabled" changes nothing for it.
- An assistant turn's `thinking` blocks (with their `signature`, not checked) are the
  turn's `reasoning_content`; the chat template keeps or drops it.
"""

from __future__ import annotations

from typing import Any

from juggler.errors import BadRequest

#: Anthropic's least thinking budget.
MIN_BUDGET = 1024


def request_thinking(thinking: Any, max_tokens: int | None) -> dict[str, Any]:
    """The OpenAI body fields of `thinking` (a `wire.Thinking`, or None)."""
    if thinking is None:
        return {"chat_template_kwargs": {"enable_thinking": False}}
    fields = dict(thinking.model_extra or {})
    kind = thinking.type
    if kind not in ("enabled", "disabled", "adaptive"):
        raise BadRequest(
            f"thinking.type: expected enabled, adaptive or disabled, not {kind[:40]!r}",
            param="thinking.type",
        )
    budget = fields.pop("budget_tokens", None)
    fields.pop("display", None)  # how a client shows thinking: Juggler's is always whole
    if fields:
        name = sorted(fields)[0]
        raise BadRequest(f"thinking.{name}: not a thinking setting", param=f"thinking.{name}")
    if kind == "enabled":
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET:
            raise BadRequest(
                f"thinking.budget_tokens: expected an integer of at least {MIN_BUDGET}",
                param="thinking.budget_tokens",
            )
        if max_tokens is not None and budget >= max_tokens:
            raise BadRequest(
                "thinking.budget_tokens: must be less than max_tokens",
                param="thinking.budget_tokens",
            )
    elif budget is not None:
        raise BadRequest(
            f"thinking.budget_tokens: only with type enabled, not {kind}",
            param="thinking.budget_tokens",
        )
    out: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": kind != "disabled"}}
    if kind == "enabled":
        out["thinking_budget_tokens"] = budget
    return out


def thinking_text(param: str, block: Any) -> str | None:
    """An assistant turn's `thinking` block's text; None for any other block."""
    if getattr(block, "type", None) != "thinking":
        return None
    text = (block.model_extra or {}).get("thinking")
    if not isinstance(text, str):
        raise BadRequest(f"{param}.thinking: expected a string", param=f"{param}.thinking")
    return text
