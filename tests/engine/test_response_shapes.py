"""The Responses API's output items and stream events, built from a choice's deltas."""

from __future__ import annotations

import json

from juggler.engine.http.response_shapes import EventNumbers, OutputItems
from juggler.engine.structured.tool_stream import ArgsDelta, CallStart, TextDelta


def test_text_becomes_one_message_item_with_one_output_text_part() -> None:
    items = OutputItems()
    events = items.feed([TextDelta("Hel")]) + items.feed([TextDelta("lo")]) + items.close()
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    (item,) = items.items
    assert item["type"] == "message" and item["status"] == "completed"
    assert item["content"][0]["text"] == "Hello" and events[4]["text"] == "Hello"
    assert events[0]["item"]["status"] == "in_progress"


def test_each_tool_call_is_a_function_call_item_with_its_arguments() -> None:
    items = OutputItems()
    events = items.feed(
        [CallStart(0, "call_a", "f"), ArgsDelta(0, '{"x"'), ArgsDelta(0, ": 1}")]
    ) + items.feed([CallStart(1, "call_b", "g"), ArgsDelta(1, "{}")])
    events += items.close("incomplete")
    calls = [(i["call_id"], i["name"], i["arguments"], i["status"]) for i in items.items]
    assert calls == [("call_a", "f", '{"x": 1}', "incomplete"), ("call_b", "g", "{}", "incomplete")]
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["output_index"], e["arguments"]) for e in done] == [(0, '{"x": 1}'), (1, "{}")]


def test_an_empty_answer_is_still_a_message_and_events_are_numbered() -> None:
    items = OutputItems()
    events = items.close()
    assert items.items[0]["content"][0]["text"] == ""
    numbers = EventNumbers()
    framed = [numbers.frame(e) for e in events]
    assert framed[0].startswith(b"event: response.output_item.added\ndata: ")
    assert json.loads(framed[-1].split(b"data: ", 1)[1])["sequence_number"] == 4
