"""Request bodies of the backend's HTTP API and the OpenAI shapes of its answers.

Pure data: pydantic models that validate requests (FastAPI turns failures into 400s in
OpenAI's error shape) and functions that build response / chunk dictionaries.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.stream import RequestStats
from juggler.errors import BadRequest


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    include_usage: bool = False


class ChatMessage(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type", "text") != "text":
                raise BadRequest("only text content parts are supported", param="messages")
            parts.append(str(part.get("text", "")))
        return "".join(parts)

    def as_template_input(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.text()}


class SamplingBody(_Body):
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    ignore_eos: bool = False

    @field_validator("n")
    @classmethod
    def _only_one(cls, v: int | None) -> int | None:
        if v is not None and v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop sequences")
        return v

    def sampling(self, default_max: int, max_override: int | None = None) -> SamplingParams:
        base = SamplingParams()
        limit = (
            max_override
            if max_override is not None
            else (
                self.max_completion_tokens
                if self.max_completion_tokens is not None
                else self.max_tokens
            )
        )
        stops: tuple[str, ...] = ()
        if isinstance(self.stop, str):
            stops = (self.stop,)
        elif self.stop:
            stops = tuple(self.stop)
        return SamplingParams(
            max_new_tokens=default_max if limit is None else limit,
            temperature=base.temperature if self.temperature is None else self.temperature,
            top_k=base.top_k if self.top_k is None else self.top_k,
            top_p=base.top_p if self.top_p is None else self.top_p,
            min_p=base.min_p if self.min_p is None else self.min_p,
            seed=self.seed,
            repeat_penalty=base.repeat_penalty
            if self.repeat_penalty is None
            else self.repeat_penalty,
            frequency_penalty=self.frequency_penalty or 0.0,
            presence_penalty=self.presence_penalty or 0.0,
            stop=stops,
            ignore_eos=self.ignore_eos,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatRequest(SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(SamplingBody):
    prompt: str | list[str]

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise BadRequest("prompt must be a string or a list of one string", param="prompt")
        return self.prompt[0]


class SessionInput(_Body):
    text: str | None = None
    messages: list[ChatMessage] | None = None


class SessionGenerate(SamplingBody):
    max_new_tokens: int | None = Field(default=None, ge=0)


class EmbeddingRequest(_Body):
    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float"] | None = None


class RerankRequest(_Body):
    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = Field(default=None, ge=0)
    return_documents: bool = True


# -- response shapes ---------------------------------------------------------------------
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
