"""Issue 49: "Tool calls made after thinking still parse". A chat choice fed a reasoning
model's output token by token: thinking first (`reasoning_content` deltas), then the
answer's tool calls, parsed as ever; the final message carries both."""

from __future__ import annotations

import json

import pytest

from juggler.api.structured import FunctionDef
from juggler.engine.http.choices import Choice
from juggler.engine.schedule.stream import EventKind, StreamEvent
from juggler.engine.structured.tools import ToolPlan, ToolSyntax
from juggler.engine.thinking.template import ThinkPlan

WEATHER = FunctionDef(name="weather", parameters={"type": "object"})
THOUGHT = "<think>\nThe user wants weather.\n</think>\n\n"
OUTPUTS = {
    ToolSyntax.HERMES: THOUGHT
    + '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ToolSyntax.GENERIC: THOUGHT
    + '{"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]}',
}


@pytest.mark.parametrize("size", [1, 3, 8])
@pytest.mark.parametrize("syntax", list(ToolSyntax))
def test_tool_calls_after_thinking_parse(size: int, syntax: ToolSyntax) -> None:
    plan = ToolPlan((WEATHER,), "auto", True, syntax)
    c = Choice(0, plan, ThinkPlan(reasons=True, on=True))
    deltas = []
    out = OUTPUTS[syntax]
    pieces = [out[i : i + size] for i in range(0, len(out), size)]
    for piece in pieces:
        deltas += c.feed(StreamEvent(EventKind.TOKEN, piece))
    deltas += c.feed(StreamEvent(EventKind.DONE, finish_reason="stop"))
    thinking = "".join(d.get("reasoning_content", "") for d in deltas)
    assert thinking == "The user wants weather."
    assert not any(d.get("content") for d in deltas), "no text answer"
    message = c.message()
    assert message["reasoning_content"] == "The user wants weather."
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert c.finish_reason("stop") == "tool_calls"


def test_without_a_reasoning_model_think_tags_are_content() -> None:
    c = Choice(0)
    c.feed(StreamEvent(EventKind.DONE, "<think>x</think>y", finish_reason="stop"))
    assert c.message() == {"role": "assistant", "content": "<think>x</think>y"}


def test_reasoning_format_none_leaves_the_thinking_in_the_content() -> None:
    c = Choice(0, None, ThinkPlan(reasons=True, on=True, split=False))
    c.feed(StreamEvent(EventKind.DONE, "<think>x</think>y", finish_reason="stop"))
    assert c.message() == {"role": "assistant", "content": "<think>x</think>y"}
