"""OpenAI-shaped request bodies, validated identically by the router and the engine.

Pure data. A failure becomes a 400 in OpenAI's error shape that names the field. Every
field declared here is implemented; a field that is not declared is refused with a 400
`unsupported_parameter` naming it (`extra="forbid"`), never ignored. The router still
forwards the client's raw body, so what reaches the engine is exactly what was sent.

Here: the chat message, the sampling and generation bodies, chat and completions
requests, sessions and tokenize. Embeddings and rerank bodies (with the bounds on their
tokens) are `embeddings.py`'s; the configurable caps on a body's lists, `limits.py`'s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from juggler.api import media
from juggler.api.limits import MAX_INPUTS, MAX_MESSAGES, capped
from juggler.api.structured import ResponseFormat, Strict, Tool, ToolCall, ToolChoice
from juggler.errors import BadRequest

#: Most choices one request may ask for (`n`).
MAX_CHOICES = 16
#: Most entries of `logit_bias`.
MAX_LOGIT_BIAS = 1024


class _Body(Strict):
    pass


class AdapterSpec(BaseModel):
    """The LoRA adapter a request runs with, as the router tells its backend (clients
    name an adapter as the model; the router refuses this field from them)."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(min_length=1)
    path: StrictStr = Field(min_length=1)


#: The body field that carries `AdapterSpec` from the router to a backend.
ADAPTER_FIELD = "juggler_adapter"
#: Router -> backend: a chat's prompt rendered by a created model's TEMPLATE (Ollama's).
PROMPT_FIELD = "juggler_prompt"
#: Router -> backend: a created model's PARAMETERs the Responses API has no field for.
SAMPLING_FIELD = "juggler_sampling"


class StreamOptions(_Body):
    include_usage: StrictBool = False


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: StrictStr | None = None
    #: An earlier assistant turn's tool calls.
    tool_calls: list[ToolCall] | None = None
    #: A tool result: the call it answers.
    tool_call_id: StrictStr | None = None
    #: An earlier assistant turn's thinking (as llama-server, vLLM and DeepSeek take it):
    #: the chat template keeps or drops it.
    reasoning_content: StrictStr | None = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, v: str | list[dict[str, Any]] | None) -> Any:
        if isinstance(v, str) and media.IMAGE_SLOT in v:
            raise ValueError("text holds a reserved sequence")
        for part in v if isinstance(v, list) else ():
            kind = part.get("type", "text")
            if kind in media.IMAGE_PARTS:  # issue 51
                media.check_image_part(part)
                continue
            if (
                kind != "text"
                or not isinstance(part.get("text"), str)
                or set(part)
                - {
                    "type",
                    "text",
                }
            ):
                raise ValueError(f"only text and image content parts are supported, not {kind!r}")
            if media.IMAGE_SLOT in part["text"]:
                raise ValueError("text holds a reserved sequence")
        return v

    @model_validator(mode="after")
    def _roles(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("tool_calls belong to assistant messages")
        if self.tool_call_id is not None and self.role != "tool":
            raise ValueError("tool_call_id belongs to tool messages")
        if self.reasoning_content is not None and self.role != "assistant":
            raise ValueError("reasoning_content belongs to assistant messages")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(
            str(part["text"])
            if part.get("type", "text") == "text"
            else media.slot(str(media.part_url(part)))
            for part in self.content
        )

    def as_template_input(self) -> dict[str, Any]:
        role = "system" if self.role == "developer" else self.role
        out = {"role": role, "content": self.text()}
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        return out


class SamplingBody(_Body):
    """What shapes the choice of tokens: shared by chat, completions and session generate."""

    model: StrictStr | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    #: llama.cpp server's extension: how many last tokens repeat_penalty looks at (64;
    #: 0 none, -1 the whole context).
    repeat_last_n: int | None = Field(default=None, ge=-1)
    #: Token id (as a string) -> bias added to its logit (-100 bans it, 100 forces it).
    logit_bias: dict[str, float] | None = None
    #: llama.cpp server's extension: never sample an end-of-generation token.
    ignore_eos: StrictBool = False
    #: llama.cpp server's extensions: a GBNF grammar, or a JSON schema, for the output.
    grammar: StrictStr | None = None
    json_schema: dict[str, Any] | None = None
    #: Juggler's extension: prompt-lookup speculative decoding on or off for this request
    #: (greedy: the same text but where a near-tie parts it, as batching can; default: the
    #: model's `--speculative`).
    speculative: StrictBool | None = None
    #: Router -> backend only (hidden from the router's OpenAPI document).
    juggler_adapter: SkipJsonSchema[AdapterSpec | None] = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop sequences")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _biases(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return v
        if len(v) > MAX_LOGIT_BIAS:
            raise ValueError(f"at most {MAX_LOGIT_BIAS} entries")
        for key, bias in v.items():
            if not key.isdigit() or len(key) > 9:
                raise ValueError(f"keys are token ids, not {key[:20]!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"biases go from -100 to 100, not {bias}")
        return v

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


class GenerationBody(SamplingBody):
    """OpenAI's chat and completions requests: streaming, choices, the caller."""

    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    #: An end-user id, as OpenAI takes it: it changes nothing in the answer.
    user: StrictStr | None = None

    @model_validator(mode="after")
    def _stream_options(self) -> GenerationBody:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def num_choices(self) -> int:
        return self.n or 1


class ChatRequest(GenerationBody):
    messages: Annotated[list[ChatMessage], capped(MAX_MESSAGES, "messages")] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    #: Only false: Juggler does not store chat completions.
    store: StrictBool | None = None
    #: A reasoning model's thinking: "none" turns it off, any other effort on (docs/reasoning.md).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    #: More variables for the chat template (llama-server's), e.g. {"enable_thinking": false}.
    chat_template_kwargs: dict[str, Any] | None = None
    #: Juggler's extension: at most this many tokens of thinking, then it is closed
    #: (Anthropic's `thinking.budget_tokens` arrives as this).
    thinking_budget_tokens: int | None = Field(default=None, ge=0)
    #: Router -> backend only: the prompt of a created model's TEMPLATE, sent as it is.
    juggler_prompt: SkipJsonSchema[StrictStr | None] = None
    #: llama-server's: "none" leaves the thinking in the content; else it is
    #: `reasoning_content`.
    reasoning_format: Literal["auto", "deepseek", "none"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.store:
            raise ValueError("store: true is not supported (Juggler stores no completions)")
        if self.tool_choice is not None and not self.tools and self.tool_choice != "none":
            raise ValueError("tool_choice needs tools")
        return self


class CompletionRequest(GenerationBody):
    prompt: Annotated[str | list[str], capped(MAX_INPUTS, "prompts")]
    #: How many of the most likely tokens to list at each step (0 to 5).
    logprobs: int | None = Field(default=None, ge=0, le=5)
    #: Only false: the prompt is not echoed back.
    echo: StrictBool = False
    #: Only 1: one sequence is generated per choice.
    best_of: int | None = Field(default=None, ge=1, le=1)

    @model_validator(mode="after")
    def _no_echo(self) -> CompletionRequest:
        if self.echo:
            raise ValueError("echo: true is not supported")
        return self

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise BadRequest("prompt must be a string or a list of one string", param="prompt")
        return self.prompt[0]


class SessionCreate(_Body):
    model: StrictStr


class BackendSessionCreate(BaseModel):
    """What the router sends a backend to create a session."""

    model_config = ConfigDict(extra="forbid")

    juggler_adapter: AdapterSpec | None = None


class SessionInput(_Body):
    text: StrictStr | None = None
    messages: list[ChatMessage] | None = None


class SessionGenerate(SamplingBody):
    max_new_tokens: int | None = Field(default=None, ge=1)


class TokenizeRequest(BaseModel):
    """llama.cpp server's /tokenize body (Lemonade routes it to the model's backend;
    `model` picks the model, else the most recently loaded one). llamacpp.md's defaults:
    `add_special` false, `parse_special` true, `with_pieces` false."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr | None = None
    content: StrictStr
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: StrictStr | None = None
    tokens: list[int] = Field(max_length=1 << 20)
