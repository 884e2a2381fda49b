"""The Responses API's optional request fields beyond the prompt: every field the
official API defines is declared (typed as the API types it), and `refusal` decides
which of its values Juggler cannot honour.

The line between "refused" and "accepted" is drawn by the API's definition of each
value, not by what Juggler happened to build: a value that has a meaning here is
honoured (`store`, `metadata`, `include` of logprobs, `truncation`, ...); a value
that is the API's own default or that only concerns things Juggler never produces
(built-in tools' results, reasoning items, images) changes nothing and is accepted;
any other value is refused with 400 `unsupported_parameter` naming the field, never
accepted and ignored. Pure data and pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field, StrictBool, StrictStr

from juggler.api.structured import Strict
from juggler.errors import NotImplementedParam

#: What `include` may name (the API's `ResponseIncludable`).
Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]
#: The one includable with an effect here: the output text's token log-probabilities.
#: The others concern items Juggler never produces (built-in tools' calls, input
#: images, reasoning items), so including them changes nothing.
LOGPROBS = "message.output_text.logprobs"

#: The API's service tiers; "auto" and "default" are the standard processing Juggler does.
ServiceTier = Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"]


class ReasoningOptions(Strict):
    """`reasoning`: a reasoning model thinks (any effort but "none") and its thinking is
    a `reasoning` output item, whole, not summarized; a model that cannot think answers an
    effort with a 400 (docs/reasoning.md)."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    #: Which reasoning items are rendered back: there are none, so any mode is the same.
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: StrictStr | None = None


class StreamOptions(Strict):
    #: Pads each delta event with an `obfuscation` string (a side-channel mitigation).
    include_obfuscation: StrictBool | None = None


class PromptCacheOptions(Strict):
    """Juggler's prefix cache is implicit and in memory: the API's defaults hold."""

    comparison_response_id: StrictStr | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: StrictBool | None = None
    ttl: Literal["30m", "12h"] | None = None


class ConversationRef(Strict):
    id: StrictStr


class PromptRef(Strict):
    id: StrictStr
    variables: dict[str, Any] | None = None
    version: StrictStr | None = None


class ContextManagement(Strict):
    type: StrictStr
    compact_threshold: int | None = None


class ModerationOptions(Strict):
    model: StrictStr
    policy: dict[str, Any] | None = None


class AccessPrograms(Strict):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ImageOptions(Strict):
    #: Inputs are text only here: no image is ever compressed, so only "enabled"
    #: (which requires compression support) cannot be honoured.
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class AllowedTools(Strict):
    """tool_choice {"type": "allowed_tools"}: the model may call only these tools."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=128)

    def names(self) -> list[str]:
        """The allowed functions' names (a tool that is not a named function is refused)."""
        out = []
        for i, tool in enumerate(self.tools):
            name = tool.get("name")
            if tool.get("type") != "function" or not isinstance(name, str):
                raise NotImplementedParam(
                    f"tool_choice.tools.{i}", "only function tools ({type, name}) are served"
                )
            out.append(name)
        return out


#: tool_choice types naming tools Juggler does not serve (built-in, MCP, custom, shell,
#: ...): valid in the API, refused here.
HOSTED_TOOL_TYPES = frozenset(
    {
        "file_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "computer",
        "computer_use_preview",
        "computer_use",
        "image_generation",
        "code_interpreter",
        "mcp",
        "custom",
        "programmatic_tool_calling",
        "apply_patch",
        "shell",
    }
)


class ResponsesBody(Protocol):
    """What the rules read of a `responses.ResponsesRequest` (which imports this module,
    so the rules name only the fields they read)."""

    @property
    def background(self) -> Any: ...
    @property
    def conversation(self) -> Any: ...
    @property
    def prompt(self) -> PromptRef | None: ...
    @property
    def context_management(self) -> Any: ...
    @property
    def moderation(self) -> ModerationOptions | None: ...
    @property
    def access_programs(self) -> AccessPrograms | None: ...
    @property
    def image(self) -> ImageOptions | None: ...
    @property
    def service_tier(self) -> Any: ...
    @property
    def prompt_cache_retention(self) -> Any: ...
    @property
    def prompt_cache_options(self) -> PromptCacheOptions | None: ...
    @property
    def reasoning(self) -> ReasoningOptions | None: ...
    @property
    def text(self) -> Any: ...


@dataclass(frozen=True)
class Rule:
    param: str
    refused: Callable[[ResponsesBody], bool]
    why: str


def _reasoning(b: ResponsesBody) -> ReasoningOptions:
    return b.reasoning or ReasoningOptions()


def _cache(b: ResponsesBody) -> PromptCacheOptions:
    return b.prompt_cache_options or PromptCacheOptions()


RULES: tuple[Rule, ...] = (
    Rule("background", lambda b: bool(b.background), "responses run in the foreground"),
    Rule(
        "conversation",
        lambda b: b.conversation is not None,
        "there is no Conversations API; continue with previous_response_id",
    ),
    Rule("prompt", lambda b: b.prompt is not None, "there are no stored prompt templates"),
    Rule(
        "context_management",
        lambda b: bool(b.context_management),
        "conversations are not compacted (use truncation)",
    ),
    Rule("moderation", lambda b: b.moderation is not None, "no moderation model runs"),
    Rule(
        "access_programs.cyber",
        lambda b: (
            b.access_programs is not None and b.access_programs.cyber not in (None, "standard")
        ),
        "only the standard program exists here",
    ),
    Rule(
        "image.context_compression",
        lambda b: b.image is not None and b.image.context_compression == "enabled",
        "inputs are text only",
    ),
    Rule(
        "service_tier",
        lambda b: b.service_tier not in (None, "auto", "default"),
        "one processing tier serves every request (auto / default)",
    ),
    Rule(
        "prompt_cache_retention",
        lambda b: b.prompt_cache_retention == "24h",
        "the prefix cache is kept in memory only (in_memory)",
    ),
    Rule(
        "prompt_cache_options.mode",
        lambda b: _cache(b).mode == "explicit",
        "the prefix cache is implicit; there are no cache breakpoints",
    ),
    Rule(
        "prompt_cache_options.prewarm",
        lambda b: bool(_cache(b).prewarm),
        "every request generates",
    ),
    Rule(
        "prompt_cache_options.ttl",
        lambda b: _cache(b).ttl == "12h",
        "no cache lifetime is guaranteed beyond the default",
    ),
    Rule(
        "prompt_cache_options.comparison_response_id",
        lambda b: _cache(b).comparison_response_id is not None,
        "there are no prompt cache diagnostics",
    ),
    Rule(
        "reasoning.summary",
        lambda b: _reasoning(b).summary is not None,
        "a reasoning model's thinking is returned whole (reasoning_text), never summarized",
    ),
    Rule(
        "reasoning.generate_summary",
        lambda b: _reasoning(b).generate_summary is not None,
        "a reasoning model's thinking is returned whole (reasoning_text), never summarized",
    ),
    Rule(
        "reasoning.mode",
        lambda b: _reasoning(b).mode not in (None, "standard"),
        "only the standard mode exists here",
    ),
    Rule(
        "text.verbosity",
        lambda b: b.text is not None and b.text.verbosity not in (None, "medium"),
        "the answer's length is not steered (medium, the default)",
    ),
)


def refusal(body: ResponsesBody) -> NotImplementedParam | None:
    """The first value of `body` Juggler cannot honour, as the 400 that names it."""
    for rule in RULES:
        if rule.refused(body):
            return NotImplementedParam(rule.param, rule.why)
    return None
