"""The Responses API's request body (`POST /v1/responses`), validated identically by the
router and the engine. Pure data; a field that is not declared is a 400
`unsupported_parameter` naming it, as for chat completions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, StrictBool, StrictStr, Tag, model_validator
from pydantic.json_schema import SkipJsonSchema

from juggler.api.openai import AdapterSpec, ChatMessage
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


class MessageItem(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[TextPart]
    id: StrictStr | None = None
    status: StrictStr | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


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


class ResponsesRequest(Strict):
    model: StrictStr | None = None
    input: str | list[InputItem]
    instructions: StrictStr | None = None
    previous_response_id: StrictStr | None = Field(default=None, pattern=RESPONSE_ID)
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    stream: StrictBool = False
    #: Keep the response (and its conversation's KV) for retrieval and continuation.
    store: StrictBool = True
    tools: list[FunctionTool] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    text: TextConfig | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=16
    )
    #: Only "disabled": a conversation that does not fit is refused, never cut.
    truncation: Literal["disabled"] | None = None
    #: An end-user id, as OpenAI takes it: it changes nothing in the answer.
    user: StrictStr | None = None
    #: Router -> backend only (hidden from the router's OpenAPI document).
    juggler_adapter: SkipJsonSchema[AdapterSpec | None] = None

    @model_validator(mode="after")
    def _consistent(self) -> ResponsesRequest:
        if isinstance(self.input, list) and not self.input:
            raise ValueError("input is empty")
        if self.tool_choice is not None and not self.tools and self.tool_choice != "none":
            raise ValueError("tool_choice needs tools")
        return self

    def chat_tools(self) -> list[Tool] | None:
        return [t.as_chat_tool() for t in self.tools] if self.tools else None

    def chat_tool_choice(self) -> ToolChoice | None:
        c = self.tool_choice
        if isinstance(c, FunctionChoice):
            return NamedToolChoice(type="function", function=ChosenFunction(name=c.name))
        return c

    def messages(self) -> list[ChatMessage]:
        """The input as chat messages: function calls become an assistant turn's tool
        calls (consecutive ones one turn), their outputs tool messages."""
        if isinstance(self.input, str):
            return [ChatMessage(role="user", content=self.input)]
        out: list[ChatMessage] = []
        for item in self.input:
            if isinstance(item, MessageItem):
                out.append(ChatMessage(role=item.role, content=item.text()))
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
