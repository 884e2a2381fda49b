"""OpenAI-shaped request bodies, validated identically by the router and the engine.

Pure data. A failure becomes a 400 in OpenAI's error shape that names the field. Every
field declared here is implemented; a field that is not declared is refused with a 400
`unsupported_parameter` naming it (`extra="forbid"`), never ignored. The router still
forwards the client's raw body, so what reaches the engine is exactly what was sent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from juggler.api import media
from juggler.api.structured import ResponseFormat, Strict, Tool, ToolCall, ToolChoice
from juggler.errors import BadRequest

#: Most choices one request may ask for (`n`).
MAX_CHOICES = 16


class Limit(int):
    """A cap on a list in a request body whose value is a setting (`name`): the int is
    the built-in default, `configure_limits` sets the value in force (issue 27: "input
    lists ... capped (... configurable, documented)")."""

    name: str

    def __new__(cls, name: str, default: int) -> Limit:
        limit = super().__new__(cls, default)
        limit.name = name
        return limit


#: The values in force, by setting name (`configure_limits`).
_IN_FORCE: dict[str, int] = {}


def configure_limits(**values: int) -> None:
    """Set the caps in force (`max_inputs`, `max_messages`) for this process."""
    _IN_FORCE.update(values)


def limit_value(limit: int) -> int:
    return _IN_FORCE.get(limit.name, int(limit)) if isinstance(limit, Limit) else limit


#: Most inputs in one embeddings request (OpenAI's limit), documents in one rerank, and
#: prompts in one completions request (issue 27: bounded before any work). Setting
#: `max_inputs`.
MAX_INPUTS = Limit("max_inputs", 2048)


def capped(limit: int, what: str) -> Any:
    """A before-validator refusing a list longer than `limit` (a `Limit`: the value in
    force) before its items are checked, with a message that names the limit (issue 27:
    bounded before any work)."""

    def check(value: Any) -> Any:
        most = limit_value(limit)
        if isinstance(value, list) and len(value) > most:
            raise ValueError(f"at most {most} {what} in one request (got {len(value)})")
        return value

    return BeforeValidator(check)


#: Most messages in one chat request; a context holds far fewer (each costs tokens).
#: Setting `max_messages`.
MAX_MESSAGES = Limit("max_messages", 8192)
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


#: Most token ids in one embeddings input: far over any embedding model's context (the
#: backend refuses an input its context cannot hold), a bound before any work.
MAX_TOKEN_IDS = 65536
#: Most tokens of one embeddings or rerank request, summed over its inputs (OpenAI's
#: per-request limit). Issue 52: such a request is bounded by its tokens, as a chat is
#: by its context, not only by its count of inputs. Token ids count exactly when the
#: body is read; texts count at least one token an input and one per
#: `MAX_CHARS_PER_TOKEN` characters there, exactly once the backend tokenized them.
MAX_EMBEDDING_TOKENS = 300_000
#: Characters per token no tokenizer Juggler serves averages above (BPE tokens are a few
#: characters): what a lower bound on a text's tokens divides by.
MAX_CHARS_PER_TOKEN = 32


def too_many_tokens(num_tokens: int, *, exact: bool) -> str | None:
    """Why a request of `num_tokens` (or at least that many) cannot be embedded, or None."""
    if num_tokens <= MAX_EMBEDDING_TOKENS:
        return None
    least = "" if exact else "at least "
    return (
        f"the inputs hold {least}{num_tokens} tokens; one request embeds at most "
        f"{MAX_EMBEDDING_TOKENS} (split it)"
    )


def min_text_tokens(text: str) -> int:
    """A lower bound on the tokens of an embedded text (its special tokens aside)."""
    return 1 + len(text) // MAX_CHARS_PER_TOKEN


def _token_ids(value: list[Any], where: str) -> list[int]:
    """A non-empty list of token ids (ints >= 0; their upper bound is the model's
    vocabulary, checked by the backend that has it)."""
    if not value:
        raise ValueError(f"{where} is an empty list of token ids")
    if len(value) > MAX_TOKEN_IDS:
        raise ValueError(f"{where} has {len(value)} token ids; at most {MAX_TOKEN_IDS}")
    for token in value:
        if isinstance(token, bool) or not isinstance(token, int):
            raise ValueError(f"{where} mixes token ids with {type(token).__name__} values")
        if token < 0:
            raise ValueError(f"{where} holds the negative token id {token}")
    return value


def embedding_input(value: Any) -> Any:
    """OpenAI's four forms of embeddings input: a string, a list of strings, a list of
    token ids, or a list of lists of token ids; anything else (an empty list, forms
    mixed in one list, a negative id) is refused naming `input`."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError(
            "expected a string, a list of strings, a list of token ids or a list of lists "
            "of token ids"
        )
    if not value:
        raise ValueError("the list is empty")
    if all(isinstance(v, str | list) for v in value):
        most = limit_value(MAX_INPUTS)
        if len(value) > most:
            raise ValueError(f"at most {most} inputs in one request (got {len(value)})")
        if all(isinstance(v, str) for v in value):
            _bounded(sum(min_text_tokens(v) for v in value), exact=False)
            return value
        if all(isinstance(v, list) for v in value):
            for i, ids in enumerate(value):
                _token_ids(ids, f"input {i}")
            _bounded(sum(len(ids) for ids in value), exact=True)
            return value
    if any(isinstance(v, str | list) for v in value):
        raise ValueError("give one form: strings, token ids or lists of token ids, not a mix")
    return _token_ids(value, "the input")


def _bounded(num_tokens: int, *, exact: bool) -> None:
    why = too_many_tokens(num_tokens, exact=exact)
    if why is not None:
        raise ValueError(why)


#: What an embeddings request embeds: texts, or token id sequences of the model's own
#: vocabulary (embedded as given, never detokenized).
EmbeddingInput = str | list[int]


class EmbeddingRequest(_Body):
    input: Annotated[
        str | list[str] | list[StrictInt] | list[list[StrictInt]],
        BeforeValidator(embedding_input),
    ]
    model: StrictStr | None = None
    #: "base64": little-endian float32 vectors, base64-encoded (the router encodes them).
    encoding_format: Literal["float", "base64"] | None = None

    def inputs(self) -> list[EmbeddingInput]:
        """One entry per vector: a text, or a sequence of token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):  # validated: one form, never empty
            return [value]
        return list(value)


class RerankRequest(_Body):
    query: StrictStr
    documents: Annotated[list[str], capped(MAX_INPUTS, "documents")] = Field(min_length=1)
    model: StrictStr | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: StrictBool = True

    @field_validator("documents")
    @classmethod
    def _bounded_tokens(cls, documents: list[str], info: ValidationInfo) -> list[str]:
        """Issue 52: every document is ranked with the query: at most
        `MAX_EMBEDDING_TOKENS` of both together, summed over the documents."""
        query = info.data.get("query")
        extra = min_text_tokens(query) if isinstance(query, str) else 0
        _bounded(sum(min_text_tokens(d) + extra for d in documents), exact=False)
        return documents


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
