"""Request bodies the router validates before anything is loaded or forwarded.

Only the fields the router must understand are typed; everything else passes through to
the backend untouched (`extra="allow"`), so new OpenAI parameters keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr


class _Passthrough(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Passthrough):
    role: StrictStr
    content: str | list[Any] | None = None


class _Sampling(_Passthrough):
    model: StrictStr
    stream: StrictBool = False
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(_Sampling):
    prompt: str | list[str]


class EmbeddingRequest(_Passthrough):
    model: StrictStr
    input: str | list[str]


class RerankRequest(_Passthrough):
    model: StrictStr
    query: StrictStr
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)


class LoadRequest(BaseModel):
    """Lemonade's /load body (seed 000/002): per-model options beat CLI/env/config."""

    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    pinned: StrictBool | None = None
    ctx_size: int | None = Field(None, ge=64)
    llamacpp_backend: str | None = None
    llamacpp_args: str | None = None
    auto_evict: StrictBool | None = None
    downsize_idle_timeout: float | None = Field(None, ge=0)
    evict_idle_timeout: float | None = Field(None, ge=0)
    evict_weight_factor: float | None = Field(None, gt=0)
    # Lemonade clients send these on /load to register a model on the fly.
    checkpoint: str | None = None
    recipe: str | None = None


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr | None = None


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    pinned: StrictBool = True


class PullRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    checkpoint: StrictStr = ""
    recipe: StrictStr = "llamacpp"
    labels: list[str] = Field(default_factory=list)
    # Lemonade's boolean label flags.
    reasoning: StrictBool = False
    vision: StrictBool = False
    embedding: StrictBool = False
    reranking: StrictBool = False
    command: str | None = None
    health_path: str = "/health"
    device: str | None = None


class DeleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr


class SetRequest(BaseModel):
    """POST /internal/set: run-time settings (Lemonade-compatible)."""

    model_config = ConfigDict(extra="forbid")

    max_loaded_models: int | list[int] | str | None = None


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictStr


Role = Literal["system", "user", "assistant", "tool"]
