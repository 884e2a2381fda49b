"""Issue 24, item 5, through the official `anthropic` package against a real router and
backend on SmolLM2-135M: "Anthropic Messages API (POST /v1/messages, streaming and not,
system prompt, tools) ... tested with the official anthropic Python package"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema_rs
import pytest
from anthropic.types import Message, ToolUseBlock

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow
SYSTEM = "You are a helpful assistant."
QUESTION: Any = [{"role": "user", "content": "What is the capital of France?"}]
#: The SDK no longer lists the sampling fields; the API still defines them.
GREEDY: dict[str, Any] = {"extra_body": {"temperature": 0}}
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER: Any = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": WEATHER_SCHEMA,
}
ASK_WEATHER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(server: RunningServer, api_key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=api_key, max_retries=0)


@pytest.fixture(scope="module")
def claude(chat_server: RunningServer) -> Iterator[anthropic.Anthropic]:
    """The official client, pointed at the chat server as its base URL."""
    with client(chat_server) as c:
        yield c


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def ask(c: anthropic.Anthropic, **fields: Any) -> Message:
    kw: dict[str, Any] = {"model": DEFAULT_MODEL, "max_tokens": 32, "messages": QUESTION}
    message: Message = c.messages.create(**{**kw, **GREEDY, **fields})
    return message


def test_a_plain_answer_with_a_system_prompt(claude: anthropic.Anthropic) -> None:
    """Issue 24: "non-streaming text ... a system prompt"."""
    message = ask(claude, system=SYSTEM)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == DEFAULT_MODEL and message.id.startswith("msg_")
    assert "Paris" in text_of(message)
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    total_in = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert total_in > 10 and message.usage.output_tokens > 1
    # the system prompt takes effect: as text blocks it answers exactly as the string
    blocks = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert text_of(ask(claude, system=blocks)) == text_of(message)
    assert text_of(ask(claude)) != text_of(message)


def test_streaming_sends_text_in_pieces_and_the_final_message(
    claude: anthropic.Anthropic,
) -> None:
    """Issue 24: "streaming via client.messages.stream(...) collecting text and the final
    message"."""
    whole = ask(claude, system=SYSTEM)
    kw: dict[str, Any] = {"model": DEFAULT_MODEL, "max_tokens": 32, "messages": QUESTION}
    with claude.messages.stream(system=SYSTEM, **kw, **GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len([p for p in pieces if p]) > 1, "the stream must arrive in pieces"
    assert "".join(pieces) == text_of(final) == text_of(whole)
    assert final.stop_reason == whole.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == (
        whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    )


def test_a_stop_sequence_ends_the_answer_and_is_named(claude: anthropic.Anthropic) -> None:
    """Issue 24: "stop_sequences ... stop_reason: ... stop_sequence"."""
    full = text_of(ask(claude, system=SYSTEM))
    assert len(full) > 12, full
    stop = full[6:10]
    for stream in (False, True):
        fields: dict[str, Any] = {"system": SYSTEM, "stop_sequences": ["<never>", stop]}
        message: Message
        if stream:
            kw: dict[str, Any] = {"model": DEFAULT_MODEL, "max_tokens": 32, "messages": QUESTION}
            with claude.messages.stream(**kw, **fields, **GREEDY) as s:
                message = s.get_final_message()
        else:
            message = ask(claude, **fields)
        assert text_of(message) == full[: full.index(stop)]
        assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop


def test_max_tokens_cuts_the_answer(claude: anthropic.Anthropic) -> None:
    """Issue 24: "max_tokens -> stop_reason max_tokens"."""
    message = ask(claude, system=SYSTEM, max_tokens=3)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3
    full = text_of(ask(claude, system=SYSTEM))
    assert full.startswith(text_of(message)) and len(full) > len(text_of(message))


def test_a_forced_tool_call_then_its_result(claude: anthropic.Anthropic) -> None:
    """Issue 24: "a tool round trip (tool_choice {"type":"tool","name":...} forces a
    tool_use block whose input is valid JSON for the schema; then a tool_result message
    is accepted)"."""
    validator = jsonschema_rs.validator_for(WEATHER_SCHEMA)
    kw: dict[str, Any] = {"model": DEFAULT_MODEL, "max_tokens": 64, "tools": [WEATHER]}
    choice: Any = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
    first = claude.messages.create(messages=ASK_WEATHER, tool_choice=choice, **kw, **GREEDY)
    assert first.stop_reason == "tool_use", first.content
    calls = [b for b in first.content if isinstance(b, ToolUseBlock)]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert all(validator.is_valid(c.input) for c in calls), calls
    # streamed, the input arrives as input_json_delta pieces of the same call
    with claude.messages.stream(messages=ASK_WEATHER, tool_choice=choice, **kw, **GREEDY) as stream:
        kinds = [ev.type for ev in stream]
        streamed = stream.get_final_message()
    assert "input_json" in kinds and streamed.stop_reason == "tool_use"
    assert [b.input for b in streamed.content if isinstance(b, ToolUseBlock)] == [
        c.input for c in calls
    ]
    results: list[Any] = [
        {"type": "tool_result", "tool_use_id": c.id, "content": "Sunny, 24 degrees Celsius."}
        for c in calls
    ]
    conversation: Any = [
        *ASK_WEATHER,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": results},
    ]
    second = claude.messages.create(
        messages=conversation, tool_choice={"type": "none"}, **kw, **GREEDY
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert text_of(second) and not any(b.type == "tool_use" for b in second.content)
    counted = claude.messages.count_tokens(
        model=DEFAULT_MODEL, messages=conversation, tools=[WEATHER]
    )
    assert counted.input_tokens > first.usage.input_tokens + (
        first.usage.cache_read_input_tokens or 0
    )


def test_count_tokens_counts_what_a_message_is_billed(claude: anthropic.Anthropic) -> None:
    message = ask(claude, system=SYSTEM)
    counted = claude.messages.count_tokens(model=DEFAULT_MODEL, system=SYSTEM, messages=QUESTION)
    assert counted.input_tokens == message.usage.input_tokens + (
        message.usage.cache_read_input_tokens or 0
    )


def test_errors_come_in_anthropics_shape(claude: anthropic.Anthropic) -> None:
    """Issue 24: "errors (unknown model -> 404 with Anthropic error shape, missing
    max_tokens -> 400)"."""
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="no-such-model", max_tokens=8, messages=QUESTION)
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "no-such-model" in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(
            model=DEFAULT_MODEL,
            max_tokens=2048,
            messages=QUESTION,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    assert "does not support thinking" in bad.value.message, "issue 49: a model that cannot"
    with httpx.Client(base_url=str(claude.base_url), timeout=30) as c:
        r = c.post("/v1/messages", json={"model": DEFAULT_MODEL, "messages": QUESTION})
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["message"].startswith("max_tokens")


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A router with an API key and no model loaded (the first request loads one)."""
    server = start_server(
        tmp_path_factory.mktemp("keyed"),
        "--model",
        "",
        "--ctx-size",
        "2048",
        env={"JUGGLER_API_KEY": "sekrit"},
        api_key="sekrit",
    )
    try:
        yield server
    finally:
        server.stop()


def test_the_api_key_goes_in_x_api_key_or_as_a_bearer(keyed_server: RunningServer) -> None:
    """Issue 24: "auth with x-api-key when the server has an api key"."""
    body: Any = {"model": DEFAULT_MODEL, "max_tokens": 4, "messages": QUESTION}
    with httpx.Client(base_url=keyed_server.base_url, timeout=120) as c:
        r = c.post("/v1/messages", json=body, headers={"x-api-key": "sekrit"})
        assert r.status_code == 200, r.text
        Message.model_validate(r.json())
        r = c.post("/v1/messages", json=body, headers={"x-api-key": "wrong"})
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
    with client(keyed_server, "sekrit") as c:
        assert c.messages.create(**body).usage.output_tokens > 0
    with client(keyed_server, "wrong") as c, pytest.raises(anthropic.AuthenticationError):
        c.messages.create(**body)


def test_claude_style_request_with_cache_control_and_metadata(
    claude: anthropic.Anthropic,
) -> None:
    """Neutral values of fields the API defines are accepted (issue 24: "neutral values
    of defined fields accepted")."""
    message = claude.messages.create(
        model=DEFAULT_MODEL,
        max_tokens=8,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi!", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
        metadata={"user_id": "user-1"},
        service_tier="standard_only",
        thinking={"type": "disabled"},
        extra_query={"beta": "true"},
    )
    assert message.stop_reason in ("end_turn", "max_tokens")
