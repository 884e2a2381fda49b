"""Usage's reasoning tokens (OpenAI's `completion_tokens_details.reasoning_tokens`, the
Responses API's `output_tokens_details.reasoning_tokens`): the tokens of the thinking
each choice returned, counted by the model's tokenizer (the tags and the whitespace
around them aside)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def count_reasoning(tokenize: Callable[..., list[int]], thoughts: Iterable[str]) -> int:
    return sum(len(tokenize(t, add_special=False, parse_special=False)) for t in thoughts if t)


def with_reasoning(
    use: dict[str, Any], tokenize: Callable[..., list[int]], thoughts: Iterable[str]
) -> dict[str, Any]:
    """Chat usage with `completion_tokens_details.reasoning_tokens`."""
    return {
        **use,
        "completion_tokens_details": {"reasoning_tokens": count_reasoning(tokenize, thoughts)},
    }
