"""OpenAI's structured-output and tool fields, shared by chat completions and the
Responses API: `response_format`, `tools`, `tool_choice` and assistant tool calls.

Pure data, validated identically by the router and the engine; what they mean to the
engine (a grammar, a prompt) is `juggler.engine.structured`'s business.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

#: OpenAI's rule for function names.
FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class Strict(BaseModel):
    """A request body part: a field Juggler does not know is refused (400 naming it)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FunctionDef(Strict):
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    #: A JSON schema of the arguments object; the arguments are always held to it.
    parameters: dict[str, Any] | None = None
    #: Accepted either way: Juggler's grammar always enforces `parameters`.
    strict: StrictBool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDef


class ChosenFunction(Strict):
    name: StrictStr


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: ChosenFunction


#: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class FunctionCall(Strict):
    name: StrictStr
    #: The arguments as a JSON text, as OpenAI sends them.
    arguments: StrictStr


class ToolCall(Strict):
    """A tool call of an earlier assistant message (sent back in the conversation)."""

    id: StrictStr
    type: Literal["function"] = "function"
    function: FunctionCall


class JsonSchemaFormat(Strict):
    name: StrictStr = Field(default="response", max_length=64)
    description: StrictStr | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    #: Accepted either way: the schema is always enforced by a grammar.
    strict: StrictBool | None = None


class ResponseFormat(Strict):
    """OpenAI's `response_format`; `schema` on json_object is llama.cpp server's
    extension (a JSON schema without the json_schema wrapper)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")

    @model_validator(mode="after")
    def _shape(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a json_schema object")
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f"json_schema does not go with type {self.type}")
        if self.type == "text" and self.schema_ is not None:
            raise ValueError("schema does not go with type text")
        return self

    def schema_of(self) -> dict[str, Any] | None:
        """The JSON schema the output must match; {} for any JSON object; None: text."""
        if self.type == "json_schema":
            assert self.json_schema is not None
            return self.json_schema.schema_
        if self.type == "json_object":
            return self.schema_ if self.schema_ is not None else {}
        return None
