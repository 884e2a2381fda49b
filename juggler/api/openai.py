"""OpenAI-shaped request bodies, validated identically by the router and the engine.

Pure data. A failure becomes a 400 in OpenAI's error shape that names the field. Fields
the engine does not implement are not declared here; unknown fields pass through
(`extra="allow"`) so that the router can forward a body untouched.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator
from pydantic.json_schema import SkipJsonSchema

from juggler.errors import BadRequest


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class AdapterSpec(BaseModel):
    """The LoRA adapter a request runs with, as the router tells its backend (clients
    name an adapter as the model; the router refuses this field from them)."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(min_length=1)
    path: StrictStr = Field(min_length=1)


#: The body field that carries `AdapterSpec` from the router to a backend.
ADAPTER_FIELD = "juggler_adapter"


class StreamOptions(_Body):
    include_usage: StrictBool = False


class ChatMessage(_Body):
    role: StrictStr
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
    """Sampling fields shared by chat, completions and session generate."""

    model: StrictStr | None = None
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
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    #: llama.cpp server's extension: never sample an end-of-generation token.
    ignore_eos: StrictBool = False
    #: Router -> backend only (hidden from the router's OpenAPI document).
    juggler_adapter: SkipJsonSchema[AdapterSpec | None] = None

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

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def stops(self) -> tuple[str, ...]:
        if isinstance(self.stop, str):
            return (self.stop,)
        return tuple(self.stop or ())

    def token_limit(self) -> int | None:
        """max_completion_tokens (the newer name) wins over max_tokens."""
        return (
            self.max_completion_tokens
            if self.max_completion_tokens is not None
            else self.max_tokens
        )


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


class EmbeddingRequest(_Body):
    input: str | list[str]
    model: StrictStr | None = None
    encoding_format: Literal["float"] | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class RerankRequest(_Body):
    query: StrictStr
    documents: list[str] = Field(min_length=1)
    model: StrictStr | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: StrictBool = True


class SessionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictStr


class BackendSessionCreate(BaseModel):
    """What the router sends a backend to create a session."""

    model_config = ConfigDict(extra="forbid")

    juggler_adapter: AdapterSpec | None = None


class SessionInput(_Body):
    text: StrictStr | None = None
    messages: list[ChatMessage] | None = None


class SessionGenerate(SamplingBody):
    max_new_tokens: int | None = Field(default=None, ge=0)
