"""Anthropic's Messages API as data (the official `anthropic` package's
`MessageCreateParams` and `MessageCountTokensParams`), and its error shape. Pure data;
what a request means to a backend is `request`, the routes are `routes`.

A field the API does not define is a 400 naming it (`extra="forbid"`). Fields it defines
are declared here with their types; those whose value asks for something Juggler cannot
do (an image, thinking, a server tool, ...) are refused by `request` with a 400
that names them and says why, and their neutral values are accepted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationError,
)

from juggler.api.limits import MAX_MESSAGES, capped
from juggler.api.structured import FUNCTION_NAME, Strict
from juggler.errors import JugglerError
from juggler.options import bad_request_of

#: The routes that speak this dialect (their errors take Anthropic's shape).
PATHS = frozenset(
    prefix + route
    for prefix in ("/v1", "/api/v1")
    for route in ("/messages", "/messages/count_tokens")
)


#: The tags of the unions below: left out of the field paths that errors name.
TAGS = tuple(
    f"<{t}>"
    for t in ["str", "list", "text", "tool_use", "tool_result", "other", "client", "server"]
)
M = TypeVar("M", bound=BaseModel)


def is_anthropic_path(path: str) -> bool:
    return path.rstrip("/") in PATHS


def validated(model: type[M], data: dict[str, Any]) -> M:
    """`data` as `model`, or a 400 naming the field (as `messages.0.content.1.text`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise bad_request_of(exc.errors()[0], skip=TAGS) from None


class CacheControl(Strict):
    """A prompt-cache breakpoint: Juggler's prefix cache keeps every prompt's KV anyway."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class AnthropicTextBlock(Strict):
    type: Literal["text"]
    #: Anthropic refuses an empty text block ("text content blocks must be non-empty").
    text: StrictStr = Field(min_length=1)
    cache_control: CacheControl | None = None
    #: Citations of an earlier answer, sent back as it came (no effect on the prompt).
    citations: list[Any] | None = None


class OtherBlock(BaseModel):
    """A content block Juggler does not build (image, document, thinking, ...): read only
    to refuse it by name."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr


class DirectCaller(Strict):
    type: Literal["direct"]


class AnthropicToolUse(Strict):
    type: Literal["tool_use"]
    id: StrictStr = Field(min_length=1, max_length=128)
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: DirectCaller | None = None
    #: Only null: Juggler has no toolsets.
    toolset_name: None = None


#: Content is a string or a list of blocks; told apart first, so that an error names the
#: field inside the list rather than the string the content is not.
_TEXT_OR_LIST = Discriminator(lambda v: "<str>" if isinstance(v, str) else "<list>")


def _type_of(v: Any) -> Any:
    return v.get("type") if isinstance(v, dict) else getattr(v, "type", None)


def _kind(v: Any) -> str:
    kind = _type_of(v)
    return f"<{kind}>" if kind in ("text", "tool_use", "tool_result") else "<other>"


ResultPart = Annotated[
    Annotated[AnthropicTextBlock, Tag("<text>")] | Annotated[OtherBlock, Tag("<other>")],
    Discriminator(lambda v: "<text>" if _kind(v) == "<text>" else "<other>"),
]
ResultContent = Annotated[
    Annotated[StrictStr, Tag("<str>")] | Annotated[list[ResultPart], Tag("<list>")], _TEXT_OR_LIST
]


class AnthropicToolResult(Strict):
    type: Literal["tool_result"]
    tool_use_id: StrictStr = Field(min_length=1)
    content: ResultContent = ""
    is_error: StrictBool | None = None
    cache_control: CacheControl | None = None
    #: Only null: Juggler has no toolsets.
    toolset_name: None = None


Block = Annotated[
    Annotated[AnthropicTextBlock, Tag("<text>")]
    | Annotated[AnthropicToolUse, Tag("<tool_use>")]
    | Annotated[AnthropicToolResult, Tag("<tool_result>")]
    | Annotated[OtherBlock, Tag("<other>")],
    Discriminator(_kind),
]
MessageContent = Annotated[
    Annotated[StrictStr, Tag("<str>")]
    | Annotated[list[Block], Field(min_length=1), Tag("<list>")],  # `[]`: 400 naming it
    _TEXT_OR_LIST,
]
SystemContent = Annotated[
    Annotated[StrictStr, Tag("<str>")] | Annotated[list[AnthropicTextBlock], Tag("<list>")],
    _TEXT_OR_LIST,
]


class AnthropicMessage(Strict):
    role: Literal["user", "assistant", "system"]
    content: MessageContent


class AnthropicTool(Strict):
    """A client tool (no `type`, or "custom")."""

    name: StrictStr = Field(pattern=FUNCTION_NAME)
    input_schema: dict[str, Any]
    description: StrictStr | None = None
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    #: Accepted either way: Juggler's grammar always holds the input to its schema.
    strict: StrictBool | None = None
    defer_loading: StrictBool | None = None
    eager_input_streaming: StrictBool | None = None
    allowed_callers: list[StrictStr] | None = None
    input_examples: list[dict[str, Any]] | None = None


class ServerTool(BaseModel):
    """A server tool (`web_search_20250305`, `bash_20250124`, ...): read only to refuse it
    by name."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr


AnyTool = Annotated[
    Annotated[AnthropicTool, Tag("<client>")] | Annotated[ServerTool, Tag("<server>")],
    Discriminator(lambda v: "<client>" if _type_of(v) in (None, "custom") else "<server>"),
]


class ToolChoiceAuto(Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: StrictBool | None = None


class ToolChoiceAny(Strict):
    type: Literal["any"]
    disable_parallel_tool_use: StrictBool | None = None


class ToolChoiceTool(Strict):
    type: Literal["tool"]
    name: StrictStr
    disable_parallel_tool_use: StrictBool | None = None


class ToolChoiceNone(Strict):
    type: Literal["none"]


AnthropicToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class Thinking(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: StrictStr


class OutputFormat(Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(Strict):
    effort: StrictStr | None = None
    format: OutputFormat | None = None


class Metadata(Strict):
    #: An end-user id, as Anthropic takes it: it changes nothing in the answer.
    user_id: StrictStr | None = None


class PromptBody(Strict):
    """What a prompt is made of: `POST /v1/messages/count_tokens`'s whole body."""

    model: StrictStr = Field(min_length=1)
    messages: Annotated[list[AnthropicMessage], capped(MAX_MESSAGES, "messages")] = Field(
        min_length=1
    )
    system: SystemContent | None = None
    tools: list[AnyTool] | None = Field(default=None, max_length=128)
    tool_choice: AnthropicToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    speed: Literal["standard", "fast"] | None = None


class MessagesRequest(PromptBody):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stream: StrictBool = False
    stop_sequences: list[StrictStr] | None = Field(default=None, max_length=16)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    #: Juggler has one tier: both values ask for it.
    service_tier: Literal["auto", "standard_only"] | None = None
    container: Any = None
    inference_geo: StrictStr | None = None
    diagnostics: Any = None


# -- errors ----------------------------------------------------------------------------------
#: HTTP status -> Anthropic's error type (other 4xx: invalid_request_error, 5xx: api_error).
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_body(exc: JugglerError, request_id: str = "") -> dict[str, Any]:
    """Anthropic's error shape: {"type": "error", "error": {"type", "message"}}."""
    default = "api_error" if exc.status >= 500 else "invalid_request_error"
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(exc.status, default), "message": exc.message},
    }
    if request_id:
        body["request_id"] = request_id
    return body
