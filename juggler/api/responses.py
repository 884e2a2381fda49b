"""The Responses API's request body (`POST /v1/responses`), validated identically by the
router and the engine. Pure data. Every field the official API defines is declared; a
value Juggler cannot honour is a 400 `unsupported_parameter` naming the field
(`response_options.refusal`), and so is a field the API does not define.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from juggler.api.media import image_part, slot
from juggler.api.openai import AdapterSpec, ChatMessage
from juggler.api.response_options import (
    HOSTED_TOOL_TYPES,
    LOGPROBS,
    AccessPrograms,
    AllowedTools,
    ContextManagement,
    ConversationRef,
    ImageOptions,
    Includable,
    ModerationOptions,
    PromptCacheOptions,
    PromptRef,
    ReasoningOptions,
    ServiceTier,
    StreamOptions,
    refusal,
)
from juggler.api.structured import (
    FUNCTION_NAME,
    ChosenFunction,
    FunctionCall,
    FunctionDef,
    NamedToolChoice,
    Strict,
    Tool,
    ToolCall,
    ToolChoice,
)
from juggler.errors import BadRequest, NotImplementedParam
from juggler.options import bad_request_of

#: A response id as Juggler makes them (the router picks it, the backend keeps it).
RESPONSE_ID = r"^resp_[0-9a-f]{32}$"
#: The header in which the router tells the backend the id of the response it creates.
RESPONSE_ID_HEADER = "x-juggler-response-id"


class TextPart(Strict):
    type: Literal["input_text", "output_text", "text"]
    text: StrictStr
    #: Parts of earlier outputs, sent back as they came (no effect on the prompt).
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class ImagePart(Strict):
    """An image in the input (issue 51): a data URL, or an http(s) URL the router
    fetches where the admin allows it (no stored files: no file_id)."""

    type: Literal["input_image"]
    image_url: StrictStr
    detail: Literal["auto", "low", "high"] | None = None

    def as_chat_part(self) -> dict[str, Any]:
        return image_part(self.image_url)


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[TextPart | ImagePart]
    id: StrictStr | None = None
    status: StrictStr | None = None
    #: An earlier assistant message's phase, sent back as it came (no effect).
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(
            p.text if isinstance(p, TextPart) else slot(p.image_url) for p in self.content
        )

    def chat_content(self) -> str | list[dict[str, Any]]:
        """The content as a chat message's: text, or parts where it holds images."""
        if isinstance(self.content, str) or all(isinstance(p, TextPart) for p in self.content):
            return self.text()
        return [
            {"type": "text", "text": p.text} if isinstance(p, TextPart) else p.as_chat_part()
            for p in self.content
        ]


class FunctionCallItem(Strict):
    type: Literal["function_call"]
    call_id: StrictStr
    name: StrictStr
    arguments: StrictStr
    id: StrictStr | None = None
    status: StrictStr | None = None


class FunctionCallOutputItem(Strict):
    type: Literal["function_call_output"]
    call_id: StrictStr
    output: StrictStr
    id: StrictStr | None = None
    status: StrictStr | None = None


def _item_kind(v: Any) -> str:
    kind = v.get("type", "message") if isinstance(v, dict) else getattr(v, "type", "message")
    return str(kind)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(_item_kind),
]


class FunctionTool(Strict):
    """The Responses API's function tool (flat, unlike chat's {"function": {...}})."""

    type: Literal["function"]
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    def as_chat_tool(self) -> Tool:
        fn = FunctionDef(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            strict=self.strict,
        )
        return Tool(type="function", function=fn)


class FunctionChoice(Strict):
    type: Literal["function"]
    name: StrictStr


class TextFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: StrictStr | None = None
    description: StrictStr | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None

    @model_validator(mode="after")
    def _shape(self) -> TextFormat:
        if self.type == "json_schema" and self.schema_ is None:
            raise ValueError("type json_schema needs a schema")
        return self


class TextConfig(Strict):
    format: TextFormat | None = None
    #: Only "medium" (the API's default) is honoured: see `response_options`.
    verbosity: Literal["low", "medium", "high"] | None = None


def _tool_choice(v: Any) -> Any:
    """tool_choice as the API defines it: a mode, a function, allowed tools, or a tool
    type Juggler does not serve (refused, naming tool_choice)."""
    if v is None or v in ("none", "auto", "required"):
        return v
    if not isinstance(v, dict):
        raise BadRequest(
            "tool_choice: expected none, auto, required or an object", param="tool_choice"
        )
    kind = v.get("type")
    models: dict[str, type[Strict]] = {"function": FunctionChoice, "allowed_tools": AllowedTools}
    model = models.get(str(kind))
    if model is None:
        if isinstance(kind, str) and kind in HOSTED_TOOL_TYPES:
            raise NotImplementedParam("tool_choice", f"{kind} tools are not served (functions are)")
        raise BadRequest(f"tool_choice.type: unknown type {kind!r}", param="tool_choice.type")
    try:
        return model.model_validate(v)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise bad_request_of({**err, "loc": ("tool_choice", *err["loc"])}) from None


ResponseToolChoice = Annotated[
    Literal["none", "auto", "required"] | FunctionChoice | AllowedTools,
    BeforeValidator(_tool_choice),
]


class ResponsesRequest(Strict):
    model: StrictStr | None = None
    input: str | list[InputItem]
    instructions: StrictStr | None = None
    previous_response_id: StrictStr | None = Field(default=None, pattern=RESPONSE_ID)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    #: Keep the response (and its conversation's KV) for retrieval and continuation.
    store: StrictBool = True
    tools: list[FunctionTool] | None = Field(default=None, max_length=128)
    tool_choice: ResponseToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    #: Counts calls of built-in tools, which Juggler does not serve: nothing to limit.
    max_tool_calls: int | None = Field(default=None, ge=0)
    text: TextConfig | None = None
    metadata: (
        dict[
            Annotated[str, Field(max_length=64)],
            Annotated[str, Field(max_length=512)],
        ]
        | None
    ) = Field(default=None, max_length=16)
    #: "disabled": a conversation that does not fit is refused; "auto": its oldest
    #: items are dropped until it fits.
    truncation: Literal["auto", "disabled"] | None = None
    include: list[Includable] | None = Field(default=None, max_length=16)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    reasoning: ReasoningOptions | None = None
    service_tier: ServiceTier | None = None
    #: Hints for OpenAI's own cache and abuse detection: they change nothing here.
    prompt_cache_key: StrictStr | None = Field(default=None, max_length=1024)
    safety_identifier: StrictStr | None = Field(default=None, max_length=128)
    #: An end-user id, as OpenAI takes it: it changes nothing in the answer.
    user: StrictStr | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    background: StrictBool | None = None
    conversation: StrictStr | ConversationRef | None = None
    prompt: PromptRef | None = None
    context_management: list[ContextManagement] | None = None
    moderation: ModerationOptions | None = None
    access_programs: AccessPrograms | None = None
    image: ImageOptions | None = None
    #: Router -> backend only (hidden from the router's OpenAPI document).
    juggler_adapter: SkipJsonSchema[AdapterSpec | None] = None
    #: Router -> backend only: a created model's PARAMETERs (OpenAI sampling fields).
    juggler_sampling: SkipJsonSchema[dict[str, Any] | None] = None

    @field_validator("stream", "store", mode="before")
    @classmethod
    def _null_is_default(cls, v: Any, info: ValidationInfo) -> Any:
        """The API takes null for the default (stream false, store true)."""
        return (info.field_name == "store") if v is None else v

    @model_validator(mode="after")
    def _consistent(self) -> ResponsesRequest:
        if isinstance(self.input, list) and not self.input:
            raise ValueError("input is empty")
        if self.tool_choice is not None and not self.tools and self.tool_choice != "none":
            raise ValueError("tool_choice needs tools")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        refused = refusal(self)
        if refused is not None:
            raise refused  # a JugglerError: pydantic lets it through as it is
        if isinstance(self.tool_choice, AllowedTools):
            self.chat_tools()  # every allowed tool is one of the tools
        return self

    @property
    def wants_logprobs(self) -> bool:
        """The output text's log-probabilities are asked for (`include`, `top_logprobs`)."""
        return LOGPROBS in (self.include or ()) or self.top_logprobs is not None

    @property
    def obfuscate(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_obfuscation)

    def chat_tools(self) -> list[Tool] | None:
        """The tools as chat tools; with tool_choice allowed_tools, only those allowed."""
        if not self.tools:
            return None
        tools = self.tools
        if isinstance(self.tool_choice, AllowedTools):
            allowed = self.tool_choice.names()
            unknown = sorted(set(allowed) - {t.name for t in tools})
            if unknown:
                raise BadRequest(
                    f"tool_choice.tools: no function named {unknown[0]!r}",
                    param="tool_choice.tools",
                )
            tools = [t for t in tools if t.name in allowed]
        return [t.as_chat_tool() for t in tools]

    def chat_tool_choice(self) -> ToolChoice | None:
        c = self.tool_choice
        if isinstance(c, FunctionChoice):
            return NamedToolChoice(type="function", function=ChosenFunction(name=c.name))
        if isinstance(c, AllowedTools):
            return c.mode
        return c

    def messages(self) -> list[ChatMessage]:
        """The input as chat messages: function calls become an assistant turn's tool
        calls (consecutive ones one turn), their outputs tool messages."""
        if isinstance(self.input, str):
            return [ChatMessage(role="user", content=self.input)]
        out: list[ChatMessage] = []
        for item in self.input:
            if isinstance(item, MessageItem):
                out.append(ChatMessage(role=item.role, content=item.chat_content()))
            elif isinstance(item, FunctionCallItem):
                call = ToolCall(
                    id=item.call_id,
                    function=FunctionCall(name=item.name, arguments=item.arguments),
                )
                last = out[-1] if out else None
                if last is not None and last.role == "assistant" and last.tool_calls:
                    last.tool_calls.append(call)
                else:
                    out.append(ChatMessage(role="assistant", content=None, tool_calls=[call]))
            else:
                out.append(ChatMessage(role="tool", content=item.output, tool_call_id=item.call_id))
        return out
