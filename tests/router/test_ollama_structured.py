"""Ollama's `format` and `tools` through the real `ollama` package, against a real
router and backend on SmolLM2-135M: JSON mode and JSON-schema answers parse, and a tool
call round trip (call, result, answer) works streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import ollama
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer

pytestmark = pytest.mark.slow
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "is_capital": {"type": "boolean"},
    },
    "required": ["name", "country", "is_capital"],
    "additionalProperties": False,
}
GREEDY = {"temperature": 0, "num_predict": 120}


@pytest.fixture()
def client(chat_server: RunningServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=chat_server.base_url) as c:
        yield c


def test_format_json_answers_with_a_json_object(client: ollama.Client) -> None:
    """Ollama: "When `format` is set to `json`, the output will always be a well-formed
    JSON object"."""
    ask = [SYSTEM, {"role": "user", "content": "Reply in JSON: what is the capital of France?"}]
    reply = client.chat(DEFAULT_MODEL, messages=ask, format="json", options=GREEDY)
    assert reply.done_reason == "stop"
    assert isinstance(json.loads(reply.message.content or ""), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_format_answer_parses_and_validates(
    client: ollama.Client, stream: bool
) -> None:
    """Ollama: "Structured outputs are supported by providing a JSON schema in the
    `format` parameter. The model will generate a response that matches the schema"."""
    validator = jsonschema_rs.validator_for(CITY)
    for place in ("Paris", "Tokyo", "Lima"):
        ask = [SYSTEM, {"role": "user", "content": f"Describe the city of {place}."}]
        if stream:
            parts = list(
                client.chat(DEFAULT_MODEL, messages=ask, format=CITY, options=GREEDY, stream=True)
            )
            text = "".join(p.message.content or "" for p in parts)
            last = parts[-1]
        else:
            last = client.chat(DEFAULT_MODEL, messages=ask, format=CITY, options=GREEDY)
            text = last.message.content or ""
        assert last.done and last.done_reason == "stop", text
        assert validator.is_valid(json.loads(text)), text


def test_generate_takes_a_json_schema_format(client: ollama.Client) -> None:
    reply = client.generate(
        DEFAULT_MODEL, "Describe the city of Rome.", format=CITY, options=GREEDY
    )
    assert reply.done_reason == "stop"
    assert jsonschema_rs.validator_for(CITY).is_valid(json.loads(reply.response))


def get_weather(city: str) -> str:
    """The current weather in a city

    Args:
      city: the city
    """
    return "Sunny, 24 degrees Celsius."


def _example(city: str, result: str, answer: str) -> list[dict[str, Any]]:
    """One earlier exchange: a question, a call, its result, the answer."""
    call = {"function": {"name": "get_weather", "arguments": {"city": city}}}
    return [
        {"role": "user", "content": f"What is the weather in {city}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": "get_weather", "content": result},
        {"role": "assistant", "content": answer},
    ]


# Ollama has no tool_choice; SmolLM2-135M answers in text unless the conversation shows
# it how calls go (two examples make `{"` its first token at over 80 %).
HISTORY = [
    SYSTEM,
    *_example("Rome", "Rainy, 12 degrees Celsius.", "It is rainy in Rome, 12 degrees Celsius."),
    *_example("Oslo", "Snowy, -3 degrees Celsius.", "It is snowy in Oslo, -3 degrees Celsius."),
    {"role": "user", "content": "What is the weather in Paris?"},
]


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_round_trip(client: ollama.Client, stream: bool) -> None:
    """The model calls get_weather (arguments an object, as Ollama's `tool_calls`), the
    result goes back as a `tool` message, and the model answers from it."""
    opts = {"temperature": 0, "num_predict": 60}
    if stream:
        parts = list(
            client.chat(DEFAULT_MODEL, messages=HISTORY, tools=[get_weather], options=opts,
                        stream=True)
        )  # fmt: skip
        calls = [c for p in parts for c in p.message.tool_calls or []]
        assert parts[-1].done and parts[-1].done_reason == "stop"
        assert not "".join(p.message.content or "" for p in parts)
    else:
        reply = client.chat(DEFAULT_MODEL, messages=HISTORY, tools=[get_weather], options=opts)
        assert reply.done_reason == "stop" and not reply.message.content
        calls = list(reply.message.tool_calls or [])
    (call,) = calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == {"city": "Paris"}
    result = get_weather(**call.function.arguments)
    history = [
        *HISTORY,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": call.function.name, "content": result},
    ]
    # The answer: without tools offered, the model answers in text (as tool_choice
    # "none" does in the OpenAI tests).
    if stream:
        parts = list(client.chat(DEFAULT_MODEL, messages=history, options=opts, stream=True))
        answer, last = "".join(p.message.content or "" for p in parts), parts[-1]
    else:
        last = client.chat(DEFAULT_MODEL, messages=history, options=opts)
        answer = last.message.content or ""
    assert last.done_reason == "stop"
    assert "Sunny" in answer or "sunny" in answer or "24" in answer, answer
