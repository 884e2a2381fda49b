"""Every request field of the official Responses API (openai's
`types/responses/response_create_params.py`) against Juggler's request body: the
neutral values are accepted, a value Juggler cannot honour is a 400
`unsupported_parameter` naming the field, and a value the API does not define is a 400
naming it too. Pure validation, milliseconds; what the honoured fields do is tested on
the fake engine (tests/engine/test_http_responses_fake.py) and a real model
(test_responses_api.py, test_agents_sdk.py)."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from openai.types.responses import response_create_params

from juggler.api.responses import ResponsesRequest
from juggler.errors import BadRequest
from juggler.router.core.bodies import validate

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]


def body(**fields: Any) -> ResponsesRequest:
    return validate(ResponsesRequest, {"model": "m", "input": "hi", **fields})


def refused(**fields: Any) -> BadRequest:
    with pytest.raises(BadRequest) as err:
        body(**fields)
    return err.value


def test_every_field_of_the_official_api_is_declared() -> None:
    """Issue 24: "Accept every Responses field the official API defines" — none of them
    is an unknown parameter."""
    official = set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase))
    official |= {"stream"}
    assert official - set(ResponsesRequest.model_fields) == set()


NEUTRAL: list[dict[str, Any]] = [
    {"include": []},
    {"include": None},
    {"store": False},
    {"store": None},
    {"stream": None},
    {"truncation": "disabled"},
    {"truncation": "auto"},
    {"metadata": {"run": "7", "k" * 64: "v" * 512}},
    {"parallel_tool_calls": False, "tools": TOOLS},
    {"tool_choice": "auto", "tools": TOOLS},
    {"tool_choice": {"type": "function", "name": "f"}, "tools": TOOLS},
    {"tool_choice": "none"},
    {"text": {"format": {"type": "text"}, "verbosity": "medium"}},
    {"text": {"format": {"type": "json_object"}}},
    {"reasoning": {"effort": "none"}},
    {"reasoning": {"effort": None, "context": "auto", "mode": "standard"}},
    {"reasoning": None},
    {"max_output_tokens": 16},
    {"prompt_cache_key": "user-42"},
    {"safety_identifier": "a1b2"},
    {"user": "someone"},
    {"service_tier": "auto"},
    {"service_tier": "default"},
    {"prompt_cache_retention": "in_memory"},
    {"prompt_cache_options": {"mode": "implicit", "prewarm": False, "ttl": "30m"}},
    {"background": False},
    {"conversation": None},
    {"prompt": None},
    {"context_management": []},
    {"moderation": None},
    {"access_programs": {"cyber": "standard"}},
    {"image": {"context_compression": "auto"}},
    {"image": {"context_compression": "disabled"}},
    {"max_tool_calls": 3},
    {"top_logprobs": 2, "include": ["message.output_text.logprobs"]},
    {"include": ["reasoning.encrypted_content", "file_search_call.results"]},
    {"include": ["web_search_call.action.sources", "message.input_image.image_url"]},
    {"include": ["computer_call_output.output.image_url", "code_interpreter_call.outputs"]},
    {"include": ["web_search_call.results"]},
    {"stream": True, "stream_options": {"include_obfuscation": False}},
    {"stream": True, "stream_options": {"include_obfuscation": True}},
    {"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": TOOLS}, "tools": TOOLS},
]


@pytest.mark.parametrize("fields", NEUTRAL, ids=lambda f: ",".join(f))
def test_neutral_and_honoured_values_are_accepted(fields: dict[str, Any]) -> None:
    """Issue 24: "honour what has a meaning here, accept the neutral values of the rest
    (`include: []`, `store`, `truncation: "disabled"`)"."""
    body(**fields)


UNHONOURED: list[tuple[dict[str, Any], str]] = [
    ({"background": True}, "background"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"conversation": {"id": "conv_1"}}, "conversation"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"context_management": [{"type": "compaction"}]}, "context_management"),
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
    ({"access_programs": {"cyber": "daybreak_red"}}, "access_programs.cyber"),
    ({"image": {"context_compression": "enabled"}}, "image.context_compression"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"service_tier": "priority"}, "service_tier"),
    ({"prompt_cache_retention": "24h"}, "prompt_cache_retention"),
    ({"prompt_cache_options": {"mode": "explicit"}}, "prompt_cache_options.mode"),
    ({"prompt_cache_options": {"prewarm": True}}, "prompt_cache_options.prewarm"),
    ({"prompt_cache_options": {"ttl": "12h"}}, "prompt_cache_options.ttl"),
    (
        {"prompt_cache_options": {"comparison_response_id": "resp_1"}},
        "prompt_cache_options.comparison_response_id",
    ),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
    ({"reasoning": {"generate_summary": "concise"}}, "reasoning.generate_summary"),
    ({"reasoning": {"mode": "pro"}}, "reasoning.mode"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"tool_choice": {"type": "file_search"}, "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": {"type": "mcp", "server_label": "x"}, "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": {"type": "shell"}, "tools": TOOLS}, "tool_choice"),
]


@pytest.mark.parametrize(("fields", "param"), UNHONOURED, ids=lambda v: str(v))
def test_a_value_that_cannot_be_honoured_is_refused_naming_it(
    fields: dict[str, Any], param: str
) -> None:
    """Issue 24: "refuse with a 400 that names the field only a value we cannot
    honour"; "The rule 'refuse what we do not implement' stays"."""
    err = refused(**fields)
    assert (err.status, err.code, err.param) == (400, "unsupported_parameter", param)
    assert "not supported" in err.message


INVALID: list[tuple[dict[str, Any], str | None]] = [
    ({"include": ["everything"]}, "include.0"),
    ({"include": "message.output_text.logprobs"}, "include"),
    ({"truncation": "middle"}, "truncation"),
    ({"store": "yes"}, "store"),
    ({"service_tier": "gold"}, "service_tier"),
    ({"reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"reasoning": {"budget": 3}}, "reasoning.budget"),
    ({"top_logprobs": 21}, "top_logprobs"),
    ({"metadata": {"k" * 65: "v"}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"safety_identifier": "s" * 129}, "safety_identifier"),
    ({"stream_options": {"include_obfuscation": True}}, None),
    ({"tool_choice": {"type": "nonsense"}, "tools": TOOLS}, "tool_choice.type"),
    ({"tool_choice": "sometimes", "tools": TOOLS}, "tool_choice"),
    ({"tool_choice": {"type": "function"}, "tools": TOOLS}, "tool_choice.name"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "any", "tools": TOOLS}}, "tool_choice.mode"),
    ({"tool_choice": "required"}, None),
    ({"max_tool_calls": -1}, "max_tool_calls"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"frobnicate": True}, "frobnicate"),
]


@pytest.mark.parametrize(("fields", "param"), INVALID, ids=lambda v: str(v))
def test_a_value_the_api_does_not_define_is_a_400_naming_the_field(
    fields: dict[str, Any], param: str | None
) -> None:
    err = refused(**fields)
    assert err.status == 400
    if param is not None:
        assert err.param is not None and err.param.startswith(param)


def test_allowed_tools_narrow_the_functions_offered() -> None:
    """tool_choice allowed_tools (API: "constrains the tools available to the model to
    a pre-defined set") is honoured: only the allowed functions can be called."""
    g = {"type": "function", "name": "g"}
    two = body(
        tools=[*TOOLS, g],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [g]},
    )
    assert [t.function.name for t in two.chat_tools() or []] == ["g"]
    assert two.chat_tool_choice() == "required"
    err = refused(tools=TOOLS, tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [g]})
    assert err.param == "tool_choice.tools"
    web = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "web_search"}]}
    err = refused(tools=TOOLS, tool_choice=web)
    assert err.code == "unsupported_parameter" and err.param == "tool_choice.tools.0"


def test_logprobs_are_wanted_by_include_or_top_logprobs() -> None:
    assert not body().wants_logprobs
    assert not body(include=["reasoning.encrypted_content"]).wants_logprobs
    assert body(include=["message.output_text.logprobs"]).wants_logprobs
    assert body(top_logprobs=0).wants_logprobs
