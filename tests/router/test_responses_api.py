"""The Responses API through the official `openai` package, against a real router and
backend on SmolLM2-135M: create, stream with the API's events, continue on the cached KV
(previous_response_id), retrieve, delete, function calls and structured output."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer
from tests.router.test_end_to_end import oai

pytestmark = pytest.mark.slow
INSTRUCTIONS = "You are a helpful assistant."
ASK: dict[str, Any] = {
    "model": DEFAULT_MODEL,
    "instructions": INSTRUCTIONS,
    "temperature": 0,
    "max_output_tokens": 24,
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def test_previous_response_id_continues_on_the_cached_kv(chat_server: RunningServer) -> None:
    """Issue 14: "`previous_response_id` reuses cached tokens (assert on the reported
    cached-token count)": the second turn prefills only its own input; everything the
    first turn held (its input and its answer) is reported as cached."""
    client = oai(chat_server)
    first = client.responses.create(input="What is the capital of France?", **ASK)
    assert first.status == "completed" and "Paris" in first.output_text
    assert first.usage is not None
    held = first.usage.input_tokens + first.usage.output_tokens
    second = client.responses.create(input="And of Germany?", previous_response_id=first.id, **ASK)
    assert second.previous_response_id == first.id and second.output_text
    usage = second.usage
    assert usage is not None
    assert usage.input_tokens_details.cached_tokens >= held - 1
    assert usage.input_tokens > usage.input_tokens_details.cached_tokens
    third = client.responses.create(
        input="And of Italy?", previous_response_id=second.id, stream=True, **ASK
    )
    completed = [e for e in third if e.type == "response.completed"]
    (done,) = completed
    assert done.response.usage is not None
    assert done.response.usage.input_tokens_details.cached_tokens >= usage.input_tokens


def test_a_streamed_response_sends_the_api_events_in_order(chat_server: RunningServer) -> None:
    events = list(oai(chat_server).responses.create(input="Say hello.", stream=True, **ASK))
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].response.output_text == text  # type: ignore[union-attr]
    created = events[0].response  # type: ignore[union-attr]
    assert created.status == "in_progress" and created.id == events[-1].response.id  # type: ignore[union-attr]


def test_a_stored_response_is_retrieved_and_deleted(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    made = client.responses.create(input="Name a color.", **ASK)
    again = client.responses.retrieve(made.id)
    assert again.id == made.id and again.output_text == made.output_text
    client.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="More?", previous_response_id=made.id, **ASK)
    unstored = client.responses.create(input="Name a color.", store=False, **ASK)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_a_function_call_round_trip(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    call = client.responses.create(
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        **ASK,
    )
    (item,) = call.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert isinstance(json.loads(item.arguments)["city"], str)
    answer = client.responses.create(
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": "Sunny, 24 C"}],
        previous_response_id=call.id,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        **ASK,
    )
    assert answer.output[0].type == "message" and answer.output_text
    assert answer.usage is not None and answer.usage.input_tokens_details.cached_tokens > 0


def test_text_format_json_schema_holds_the_output(chat_server: RunningServer) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"type": "string", "maxLength": 30},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    reply = oai(chat_server).responses.create(
        input="Which city is the capital of France?",
        text={"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}},
        **{**ASK, "max_output_tokens": 60},
    )
    assert jsonschema_rs.validator_for(schema).is_valid(json.loads(reply.output_text))


def test_bad_requests_are_refused_naming_the_field(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(input="Hi", reasoning={"effort": "low"}, **ASK)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "reasoning.effort"
    assert "does not support thinking" in err.value.body["message"], "issue 49"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="Hi", previous_response_id="resp_" + "0" * 32, **ASK)
    with chat_server.client() as c:
        r = c.post(
            "/v1/responses", json={"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 0}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_output_tokens"
