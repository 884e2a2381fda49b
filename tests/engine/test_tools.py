"""Tool calling, prompt side: the plan, the conversation as the template reads it, the
template's tool support, and the grammar that holds calls to their schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from juggler.api.openai import ChatMessage
from juggler.api.structured import NamedToolChoice, Tool
from juggler.engine.llama.chat import CHATML, ChatTemplate
from juggler.engine.structured.tools import (
    ToolCaps,
    ToolSyntax,
    chat_messages,
    template_caps,
    tool_grammar,
    tool_plan,
)
from juggler.errors import BadRequest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
#: A Qwen-style template that renders tools and uses <tool_call> blocks.
HERMES_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>"
    "Answer with <tool_call>{...}</tool_call>\n{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.arguments | tojson }}"
    "</tool_call>{% endfor %}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
STRICT_TEMPLATE = (
    "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{% endif %}{{ m.content }}{% endfor %}"
)


def tools(*specs: dict[str, Any]) -> list[Tool]:
    return [Tool.model_validate(s) for s in specs]


def tpl(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="", eos_token="", origin="test")


def test_template_caps_tell_native_tool_templates_from_the_rest() -> None:
    assert template_caps(tpl(CHATML)) == ToolCaps(hermes=False, tool_role=True)
    assert template_caps(tpl(HERMES_TEMPLATE)).hermes
    assert not template_caps(tpl(STRICT_TEMPLATE)).tool_role


def test_the_plan_follows_tool_choice() -> None:
    caps = ToolCaps()
    plan = tool_plan(tools(WEATHER, TIME), None, None, caps)
    assert plan is not None and plan.choice == "auto" and plan.parallel
    assert plan.syntax is ToolSyntax.GENERIC
    named = NamedToolChoice.model_validate({"type": "function", "function": {"name": "get_time"}})
    assert tool_plan(tools(WEATHER, TIME), named, False, caps).choice == "get_time"  # type: ignore[union-attr]
    missing = NamedToolChoice.model_validate({"type": "function", "function": {"name": "nope"}})
    with pytest.raises(BadRequest) as err:
        tool_plan(tools(WEATHER), missing, None, caps)
    assert err.value.param == "tool_choice"
    assert tool_plan(None, None, None, caps) is None


def conversation() -> list[ChatMessage]:
    return [
        ChatMessage.model_validate(m)
        for m in [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]
    ]


def test_generic_format_describes_tools_in_the_system_message_and_writes_calls_as_json() -> None:
    plan = tool_plan(tools(WEATHER), "auto", None, ToolCaps())
    msgs, template_tools = chat_messages(conversation(), plan, ToolCaps())
    assert template_tools is None
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("Be brief.\n\n")
    assert '"name": "get_weather"' in msgs[0]["content"]
    assert json.loads(msgs[2]["content"]) == {
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    }
    assert msgs[3] == {"role": "tool", "content": "sunny"}
    no_role, _ = chat_messages(conversation(), plan, ToolCaps(tool_role=False))
    assert no_role[3] == {"role": "user", "content": "Result of get_weather: sunny"}


def test_tool_choice_none_keeps_the_prompt_and_allows_only_text() -> None:
    auto = tool_plan(tools(WEATHER), "auto", None, ToolCaps())
    plan = tool_plan(tools(WEATHER), "none", None, ToolCaps())
    msgs, _ = chat_messages(conversation(), plan, ToolCaps())
    assert msgs == chat_messages(conversation(), auto, ToolCaps())[0]
    assert plan is not None
    assert rules(tool_grammar(plan))["root"] == "text", "plain text that cannot open a call"


def test_native_templates_get_tools_and_calls_in_hugging_face_form() -> None:
    caps = ToolCaps(hermes=True)
    plan = tool_plan(tools(WEATHER), "auto", None, caps)
    assert plan is not None and plan.syntax is ToolSyntax.HERMES
    msgs, template_tools = chat_messages(conversation(), plan, caps)
    assert template_tools == [WEATHER]
    assert msgs[2]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    }
    assert msgs[3] == {
        "role": "tool",
        "content": "sunny",
        "tool_call_id": "call_1",
        "name": "get_weather",
    }
    text = tpl(HERMES_TEMPLATE).render(msgs, add_generation_prompt=True, tools=template_tools)
    assert '<tool_call>{"city": "Paris"}</tool_call>' in text


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.splitlines())


def test_the_grammar_holds_calls_to_each_function_and_its_schema() -> None:
    auto = tool_grammar(tool_plan(tools(WEATHER, TIME), "auto", None, ToolCaps()))  # type: ignore[arg-type]
    r = rules(auto or "")
    assert r["root"] == "calls | text"
    assert r["calls"] == '"{\\"tool_calls\\": [" space call ("," space call)* "]}"'
    assert r["call"] == "call0 | call1"
    assert '"\\"get_weather\\""' in r["call0-name"]
    assert "call0-arguments-city-kv" in r["call0-arguments"]
    single = tool_grammar(tool_plan(tools(WEATHER, TIME), "get_time", False, ToolCaps()))  # type: ignore[arg-type]
    r = rules(single or "")
    assert r["root"] == "calls" and r["call"] == "call1"
    assert "*" not in r["calls"], "parallel_tool_calls false: exactly one call"
    hermes = rules(
        tool_grammar(tool_plan(tools(WEATHER), "required", None, ToolCaps(hermes=True))) or ""
    )  # type: ignore[arg-type]
    assert hermes["calls"].startswith('"<tool_call>\\n" call "\\n</tool_call>"')


def test_refs_of_each_function_resolve_within_its_own_parameters() -> None:
    def with_defs(name: str, kind: str) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "$defs": {
                        "Item": {
                            "type": "object",
                            "properties": {"x": {"type": kind}},
                            "required": ["x"],
                        }
                    },
                    "type": "object",
                    "properties": {"item": {"$ref": "#/$defs/Item"}},
                    "required": ["item"],
                },
            },
        }

    grammar = tool_grammar(
        tool_plan(
            tools(with_defs("a", "string"), with_defs("b", "integer")), "required", None, ToolCaps()
        )
    )  # type: ignore[arg-type]
    r = rules(grammar or "")
    assert r["call0-arguments-item"] == "t0-Item" and r["call1-arguments-item"] == "t1-Item"
    assert r["t0-Item-x-kv"].endswith("string") and r["t1-Item-x-kv"].endswith("integer")
