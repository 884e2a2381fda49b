"""Parsing the model's tool calls as they stream: GENERIC and HERMES formats, arguments
piece by piece, plain text under tool_choice auto, and output cut mid-call."""

from __future__ import annotations

import itertools
import json

from juggler.engine.structured.tool_stream import (
    ArgsDelta,
    CallStart,
    Delta,
    TextDelta,
    ToolStream,
)
from juggler.engine.structured.tools import ToolSyntax, generic_calls_text


def ids() -> object:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def feed_in_pieces(stream: ToolStream, text: str, size: int) -> list[Delta]:
    out: list[Delta] = []
    for i in range(0, len(text), size):
        out += stream.feed(text[i : i + size])
    return out


def test_generic_calls_stream_a_start_then_their_arguments_in_any_piece_size() -> None:
    text = generic_calls_text(
        [("get_weather", {"city": "Paris", "days": [1, 2]}), ("get_time", {"tz": 'a"}b'})]
    )
    for size in (1, 3, 7, len(text)):
        stream = ToolStream(ToolSyntax.GENERIC, "calls", ids())  # type: ignore[arg-type]
        deltas = feed_in_pieces(stream, text, size)
        starts = [d for d in deltas if isinstance(d, CallStart)]
        assert starts == [CallStart(0, "call_0", "get_weather"), CallStart(1, "call_1", "get_time")]
        args = [
            "".join(d.text for d in deltas if isinstance(d, ArgsDelta) and d.index == i)
            for i in (0, 1)
        ]
        assert [json.loads(a) for a in args] == [{"city": "Paris", "days": [1, 2]}, {"tz": 'a"}b'}]
        assert deltas.index(starts[1]) > max(
            i for i, d in enumerate(deltas) if isinstance(d, ArgsDelta) and d.index == 0
        ), "a call's arguments come after its start and before the next call"
        assert [c.is_complete for c in stream.calls] == [True, True]
        assert not any(isinstance(d, TextDelta) for d in deltas)


def test_whitespace_the_grammar_allows_is_tolerated() -> None:
    text = (
        '{ "tool_calls":[ {"name" :"f" , "arguments" : {"a": 1} } ,{"name":"g","arguments":{}} ]}'
    )
    stream = ToolStream(ToolSyntax.GENERIC, "calls")
    stream.feed(text)
    assert [(c.name, json.loads(c.arguments)) for c in stream.complete_calls()] == [
        ("f", {"a": 1}),
        ("g", {}),
    ]


def test_hermes_blocks_are_calls_and_the_tags_are_not_text() -> None:
    text = (
        '<tool_call>\n{"name": "f", "arguments": {"x": "<b>"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
    )
    stream = ToolStream(ToolSyntax.HERMES, "auto")
    deltas = feed_in_pieces(stream, text, 4)
    assert stream.is_calls is True
    assert [(c.name, c.arguments) for c in stream.calls] == [("f", '{"x": "<b>"}'), ("g", "{}")]
    assert not any(isinstance(d, TextDelta) for d in deltas)


def test_auto_mode_passes_plain_text_through() -> None:
    stream = ToolStream(ToolSyntax.GENERIC, "auto")
    deltas = stream.feed("Paris is ") + stream.feed('sunny {"not": "a call"}')
    assert stream.is_calls is False
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == (
        'Paris is sunny {"not": "a call"}'
    )
    assert stream.calls == []


def test_a_call_cut_by_the_token_limit_is_incomplete() -> None:
    stream = ToolStream(ToolSyntax.GENERIC, "calls")
    stream.feed('{"tool_calls": [{"name": "f", "arguments": {"a": "unfinish')
    (call,) = stream.calls
    assert call.name == "f" and not call.is_complete
    assert stream.complete_calls() == []
