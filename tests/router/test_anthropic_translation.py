"""Anthropic's Messages API as the canonical OpenAI chat request, and the backend's chat
chunks back as Anthropic's events and message: the pure translations (checked against
the official `anthropic` package's types), and the refusals, auth and error shapes on
the real router app without a model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic.types as at
import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from juggler.api.openai import ChatRequest
from juggler.config import Settings
from juggler.engine.llama.sampling import StopMatcher
from juggler.errors import BadRequest, ModelNotFound, NotImplementedParam
from juggler.registry.catalog import Registry
from juggler.router.anthropic.answer import MessageEvents, fold, stop_reason
from juggler.router.anthropic.request import anthropic_param, chat_body
from juggler.router.anthropic.wire import MessagesRequest, error_body, is_anthropic_path, validated
from juggler.router.app import create_app

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"
MODEL = "SmolLM2-135M-Instruct-GGUF"
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def canonical(**fields: Any) -> dict[str, Any]:
    """The OpenAI chat body of a Messages request, checked to be a valid ChatRequest."""
    body = validated(MessagesRequest, {"model": MODEL, "max_tokens": 64, **fields})
    out = chat_body(body)
    ChatRequest.model_validate({**out, "model": MODEL})
    return out


def test_system_and_sampling_fields_map_onto_the_openai_ones() -> None:
    """Issue 24: "system prompt ... stop_sequences, temperature, top_p, top_k, metadata
    (neutral)" map onto the canonical request."""
    out = canonical(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        stop_sequences=["###", "END"],
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        metadata={"user_id": "u-1"},
        service_tier="standard_only",
        thinking={"type": "disabled"},
    )
    assert out == {
        "messages": [
            {"role": "system", "content": "Be brief.\n\nBe kind."},
            {"role": "user", "content": "Hi"},
        ],
        "max_tokens": 64,
        "stop": ["###", "END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert canonical(system="Be brief.", messages=ASK)["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }


def test_consecutive_turns_of_one_role_are_one_turn() -> None:
    """Anthropic: "Consecutive user or assistant turns in your request will be combined
    into a single turn." """
    out = canonical(
        messages=[
            {"role": "user", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
        ]
    )
    assert out["messages"] == [{"role": "user", "content": "Hello.\n\nHow are you?"}]


def test_tools_and_each_tool_choice_become_openai_tools() -> None:
    """Issue 24: "tools (name, description, input_schema) and tool_choice
    (auto/any/tool/none)"."""
    out = canonical(messages=ASK, tools=[WEATHER])
    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather in a city",
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    assert "tool_choice" not in out
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice, expected in [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        ({"type": "tool", "name": "get_weather"}, {"tool_choice": named}),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            {"tool_choice": named, "parallel_tool_calls": False},
        ),
    ]:
        got = canonical(messages=ASK, tools=[WEATHER], tool_choice=choice)
        assert {k: got[k] for k in expected} == expected, choice
        assert "parallel_tool_calls" in got or "parallel_tool_calls" not in expected
    with pytest.raises(BadRequest, match="tool_choice.name"):
        canonical(messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"})


def test_tool_use_and_tool_result_blocks_become_tool_calls_and_tool_messages() -> None:
    """Issue 24: "tool_use / tool_result blocks -> the canonical assistant tool calls /
    tool messages"."""
    out = canonical(
        messages=[
            *ASK,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        tools=[WEATHER],
    )
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "Sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    failed = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "is_error": True,
        "content": [{"type": "text", "text": "timeout"}],
    }
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    out = canonical(
        messages=[
            *ASK,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [failed]},
        ]
    )
    assert out["messages"][1]["content"] is None
    assert out["messages"][2]["content"] == "Error: timeout"


def test_output_config_format_is_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    out = canonical(
        messages=ASK, output_config={"format": {"type": "json_schema", "schema": schema}}
    )
    assert out["response_format"] == {"type": "json_schema", "json_schema": {"schema": schema}}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {
                                "type": "image",
                                "source": {"type": "file", "file_id": "file_011"},
                            },
                        ],
                    }
                ]
            },
            "messages.0.content.1",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "disabled", "budget_tokens": 2048}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "loud"}}, "thinking.type"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0"),
        ({"tools": [{**WEATHER, "type": "bash_20250124"}]}, "tools.0.type"),
        ({"speed": "fast"}, "speed"),
        ({"output_config": {"effort": "low"}}, "output_config.effort"),
        ({"inference_geo": "us"}, "inference_geo"),
        ({"messages": [*ASK, {"role": "assistant", "content": "The"}]}, "messages.1"),
        ({"frequency_penalty": 1.0}, "frequency_penalty"),
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_it(fields: dict[str, Any], named: str) -> None:
    """Issue 24: "strict: unknown fields refused with 400 naming them unless the official
    API defines them ... image -> 400 unless the model supports it"; `max_tokens`
    required."""
    raw = {"model": MODEL, "max_tokens": 16, "messages": ASK, **fields}
    if raw["max_tokens"] is None:
        del raw["max_tokens"]
    with pytest.raises(BadRequest) as caught:
        chat_body(validated(MessagesRequest, raw))
    assert caught.value.param is not None and caught.value.param.startswith(named)
    assert caught.value.status == 400


def test_a_tool_result_must_answer_an_earlier_tool_use() -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "Sunny"}
    with pytest.raises(BadRequest, match="toolu_9") as caught:
        canonical(messages=[{"role": "user", "content": [result]}])
    assert caught.value.param == "messages.0.content.0.tool_use_id"
    assert not isinstance(caught.value, NotImplementedParam)


# -- the answer ------------------------------------------------------------------------------
def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
    return {"object": "chat.completion.chunk", "choices": [choice]}


USAGE = {
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 12},
    },
}
EVENT = TypeAdapter(at.RawMessageStreamEvent)


def _run(chunks: list[dict[str, Any]], max_tokens: int = 64) -> list[dict[str, Any]]:
    answer = MessageEvents(MODEL, max_tokens)
    events = answer.start()
    for c in chunks:
        events += answer.feed(c)
    events += answer.end()
    for ev in events:
        if ev["type"] != "ping":
            EVENT.validate_python(ev)  # the official SDK's shape of each event
    return events


def test_text_then_tool_calls_stream_as_anthropic_blocks() -> None:
    """Issue 24: the streaming events message_start, content_block_start,
    content_block_delta (text_delta, input_json_delta), content_block_stop, message_delta
    (stop_reason, usage), message_stop, ping."""
    call = {"index": 0, "id": "call_1", "type": "function"}
    events = _run(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Let me"}),
            _chunk({"content": " look."}),
            _chunk(
                {"tool_calls": [{**call, "function": {"name": "get_weather", "arguments": ""}}]}
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            _chunk({}, "tool_calls"),
            USAGE,
        ]
    )
    kinds = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in events]
    assert kinds == [
        ("message_start", None, None),
        ("ping", None, None),
        ("content_block_start", 0, None),
        ("content_block_delta", 0, "text_delta"),
        ("content_block_delta", 0, "text_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None),
        ("content_block_delta", 1, "input_json_delta"),
        ("content_block_delta", 1, "input_json_delta"),
        ("content_block_stop", 1, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    assert events[6]["content_block"] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "get_weather",
        "input": {},
    }
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"] == {
        "input_tokens": 8,
        "output_tokens": 7,
        "cache_read_input_tokens": 12,
    }
    message = at.Message.model_validate(fold(events))
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Let me look."  # type: ignore[union-attr]
    assert message.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.usage.input_tokens == 8 and message.usage.output_tokens == 7


def test_a_call_cut_short_by_max_tokens_is_left_out_of_the_message() -> None:
    """Issue 52: "Anthropic with a forced tool (`tool_choice` "any") cut by `max_tokens`
    returned a text block holding the raw `{"name": "f", "arguments": {"` once, and a
    `tool_use` with `input: {}` missing a required field another time. Answer as
    Anthropic does (`stop_reason: max_tokens`, no half-parsed tool input presented as a
    call)". A whole call before the cut one stays."""
    whole = {"index": 0, "id": "call_0", "function": {"name": "f", "arguments": '{"city": "Oslo"}'}}
    for cut in ('{"city": "Pa', "", '{"'):
        call = {"index": 1, "id": "call_1", "function": {"name": "f", "arguments": cut}}
        chunks = [_chunk({"content": "Sure."}), _chunk({"tool_calls": [whole]})]
        events = _run([*chunks, _chunk({"tool_calls": [call]}), _chunk({}, "length"), USAGE], 7)
        message = at.Message.model_validate(fold(events))
        assert message.stop_reason == "max_tokens"
        assert [b.type for b in message.content] == ["text", "tool_use"], cut
        assert message.content[1].input == {"city": "Oslo"}  # type: ignore[union-attr]


def test_stop_reasons() -> None:
    """Issue 24: "stop_reason: end_turn / max_tokens / stop_sequence / tool_use"."""
    assert stop_reason("stop", None, 3, 64) == "end_turn"
    assert stop_reason("stop", "###", 3, 64) == "stop_sequence"
    assert stop_reason("length", None, 64, 64) == "max_tokens"
    assert stop_reason("length", None, 30, 64) == "model_context_window_exceeded"
    assert stop_reason("tool_calls", None, 9, 64) == "tool_use"
    events = _run([_chunk({"content": "a"}), _chunk({}, "stop", stop_reason="###"), USAGE])
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "###"}
    assert at.Message.model_validate(fold(events)).stop_sequence == "###"


def test_the_engine_names_the_stop_string_that_ended_the_output() -> None:
    """What the backend reports as its choice's `stop_reason`."""
    m = StopMatcher(("END", "##"))
    assert m.feed("a #") == ("a ", False) and m.matched is None
    assert m.feed("# b END") == ("", True)
    assert m.matched == "##"


def test_backend_errors_name_the_anthropic_fields_and_take_its_shape() -> None:
    assert anthropic_param("stop: at most 16") == "stop_sequences: at most 16"
    assert anthropic_param("stopped early") == "stopped early"
    assert anthropic_param("tools.0.function.parameters") == "tools.0.input_schema"
    assert anthropic_param("response_format.json_schema.schema: bad") == (
        "output_config.format.schema: bad"
    )
    assert error_body(ModelNotFound("model 'x' not found"), "req-1") == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "model 'x' not found"},
        "request_id": "req-1",
    }
    assert is_anthropic_path("/v1/messages") and is_anthropic_path("/api/v1/messages/")
    assert not is_anthropic_path("/v1/chat/completions")


# -- on the router app -----------------------------------------------------------------------
@pytest.fixture()
def app_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    settings = Settings(model="", api_key="sekrit", admin_api_key="boss")
    app = create_app(settings, Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_errors_take_anthropics_shape_before_any_model_loads(app_client: TestClient) -> None:
    """Issue 24: errors as {"type":"error","error":{"type":"invalid_request_error",
    "message":...}}; unknown model -> 404; missing max_tokens -> 400."""
    key = {"x-api-key": "sekrit", "anthropic-version": "2023-06-01"}
    body = {"model": "no-such-model", "max_tokens": 8, "messages": ASK}
    r = app_client.post("/v1/messages", json=body, headers=key)
    assert r.status_code == 404, r.text
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "not_found_error"
    assert "no-such-model" in r.json()["error"]["message"]
    for bad, named in [
        ({k: v for k, v in body.items() if k != "max_tokens"}, "max_tokens"),
        ({**body, "logprobs": True}, "logprobs"),
    ]:
        r = app_client.post("/api/v1/messages", json=bad, headers=key)
        assert r.status_code == 400, r.text
        assert r.json()["type"] == "error"
        assert set(r.json()["error"]) == {"type", "message"}
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["message"].startswith(named)
    r = app_client.post("/v1/messages/count_tokens", json=body, headers=key)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    r = app_client.get("/v1/messages", headers=key)
    assert r.status_code == 405 and r.json()["type"] == "error"


def test_x_api_key_carries_the_api_key_and_the_admin_key(app_client: TestClient) -> None:
    """Issue 24: "accept the server's API key in x-api-key as well as Authorization:
    Bearer ... keep every existing rule"."""
    body = {"model": "no-such-model", "max_tokens": 8, "messages": ASK}
    r = app_client.post("/v1/messages", json=body)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert (
        app_client.post("/v1/messages", json=body, headers={"x-api-key": "no"}).status_code == 401
    )
    for headers in ({"x-api-key": "sekrit"}, {"Authorization": "Bearer sekrit"}):
        assert app_client.post("/v1/messages", json=body, headers=headers).status_code == 404
    # OpenAI's routes take it too, and the admin key still rules /internal/*
    assert app_client.get("/v1/models", headers={"x-api-key": "sekrit"}).status_code == 200
    assert app_client.get("/internal/config", headers={"x-api-key": "sekrit"}).status_code == 401
    assert app_client.get("/internal/config", headers={"x-api-key": "boss"}).status_code == 200
    r = app_client.get("/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_an_empty_string_content_is_still_one_text_block() -> None:
    """Issue 52 refuses an empty text *block*; a string content stays as it was (the fuzz
    run found that building its block checked it again: a 500)."""
    body = validated(
        MessagesRequest,
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": ""}]},
    )
    assert chat_body(body)["messages"][-1]["role"] == "user"
