"""The OpenAI shapes of the backend's answers: responses, stream chunks and usage.

Pure functions that build dictionaries; the routes serialize them (as JSON, or as SSE
events through `juggler.api.sse`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from juggler.engine.schedule.stream import RequestStats


def usage(stats: RequestStats | None, *, extended: bool = False) -> dict[str, Any]:
    s = stats or RequestStats()
    out: dict[str, Any] = {
        "prompt_tokens": s.input_tokens,
        "completion_tokens": s.output_tokens,
        "total_tokens": s.input_tokens + s.output_tokens,
    }
    if extended:
        out["prompt_tokens_prefilled"] = s.prompt_tokens_prefilled
        out["prompt_tokens_reused"] = s.prompt_tokens_reused
    return out


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def chat_response(
    rid: str, model: str, text: str, finish: str, stats: RequestStats | None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage(stats),
    }


def completion_response(
    rid: str, model: str, text: str, finish: str, stats: RequestStats | None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
        "usage": usage(stats),
    }


def chat_chunk(
    rid: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def completion_chunk(
    rid: str, model: str, created: int, text: str, finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(
    rid: str, model: str, created: int, obj: str, stats: RequestStats | None
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(stats),
    }


def openai_finish(reason: str | None) -> str:
    """OpenAI knows "stop" and "length"; a cancelled stream reports "stop"."""
    return "length" if reason == "length" else "stop"
