"""Admission before work (issue 27): a prompt that cannot fit the model's context is
refused in the router, in microseconds, before a backend renders its template or
tokenizes it (100,000 short messages would hold a backend's event loop for seconds):
chat and completions, a session's input and the Responses API's input. So what a
backend renders or tokenizes for one request is at most about a context's worth, which
bounds the time a session's input (rendered on its worker, where the session's history
lives) can hold that worker's other sequences.

The bound is a lower bound on the tokens, so nothing that fits is ever refused: every
chat message costs at least one token, and no tokenizer Juggler serves averages more
than `MAX_CHARS_PER_TOKEN` characters a token. The backend still checks the exact count
after tokenizing. Pure.
"""

from __future__ import annotations

from typing import Any

from juggler.api.embeddings import MAX_CHARS_PER_TOKEN
from juggler.errors import ContextOverflow

__all__ = ["MAX_CHARS_PER_TOKEN", "min_tokens", "prompt_refusal"]


def _chars(value: Any) -> int:
    """Characters of text in a message's content (a string, or parts with text)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_chars(p.get("text")) if isinstance(p, dict) else _chars(p) for p in value)
    return 0


def min_tokens(path: str, body: Any) -> int:
    """A lower bound on the prompt tokens of a chat or completions body (0 otherwise)."""
    if not isinstance(body, dict):
        return 0
    if path.endswith("/chat/completions"):
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        return _items(messages)
    if path.endswith("/completions"):
        return _chars(body.get("prompt")) // MAX_CHARS_PER_TOKEN
    if path.endswith("/input"):  # a session's input: text, or chat messages
        return _items(body.get("messages")) + _chars(body.get("text")) // MAX_CHARS_PER_TOKEN
    if path.endswith("/responses"):  # the Responses API: a string or input items
        text = _chars(body.get("instructions")) + _chars(body.get("input"))
        return _items(body.get("input")) + text // MAX_CHARS_PER_TOKEN
    return 0


def _items(items: Any) -> int:
    """A lower bound on the tokens of a list of messages or input items: one each, plus
    their text at `MAX_CHARS_PER_TOKEN` (a bare string has no items)."""
    if not isinstance(items, list):
        return 0
    chars = sum(_chars(m.get("content")) for m in items if isinstance(m, dict))
    return len(items) + chars // MAX_CHARS_PER_TOKEN


def prompt_refusal(path: str, body: Any, ctx_size: int) -> ContextOverflow | None:
    """The refusal of a prompt that cannot fit a context of `ctx_size`, or None."""
    need = min_tokens(path, body)
    if ctx_size > 0 and need > ctx_size:
        return ContextOverflow(
            f"the prompt needs at least {need} tokens; the model's context holds {ctx_size}",
            param=_param(path),
        )
    return None


def _param(path: str) -> str:
    if path.endswith("/completions"):
        return "messages" if path.endswith("/chat/completions") else "prompt"
    return "input" if path.endswith("/responses") else "messages"
