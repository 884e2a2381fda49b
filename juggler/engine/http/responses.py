"""The OpenAI shapes of the backend's chat and completions answers: responses, stream
chunks and usage.

Pure functions that build dictionaries; the routes serialize them (as JSON, or as SSE
events through `juggler.api.sse`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from juggler.engine.schedule.stream import RequestStats


def usage(
    stats: RequestStats | None,
    *,
    extended: bool = False,
    completion_tokens: int | None = None,
) -> dict[str, Any]:
    """OpenAI's usage; `completion_tokens` overrides the count (several choices)."""
    s = stats or RequestStats()
    done = s.output_tokens if completion_tokens is None else completion_tokens
    out: dict[str, Any] = {
        "prompt_tokens": s.input_tokens,
        "completion_tokens": done,
        "total_tokens": s.input_tokens + done,
        "prompt_tokens_details": {"cached_tokens": s.prompt_tokens_reused},
    }
    if extended:
        out["prompt_tokens_prefilled"] = s.prompt_tokens_prefilled
        out["prompt_tokens_reused"] = s.prompt_tokens_reused
    return out


def choices_usage(stats: Sequence[RequestStats | None]) -> dict[str, Any]:
    """One request's usage over its choices: the prompt once, every choice's tokens."""
    done = sum(s.output_tokens for s in stats if s is not None)
    return usage(stats[0] if stats else None, completion_tokens=done)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def chat_response(
    rid: str, model: str, choices: list[dict[str, Any]], use: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": use,
    }


def completion_response(
    rid: str, model: str, choices: list[dict[str, Any]], use: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": use,
    }


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        ],
    }


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    text: str,
    finish: str | None = None,
    *,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}],
    }


def usage_chunk(
    rid: str, model: str, created: int, obj: str, use: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": use,
    }
