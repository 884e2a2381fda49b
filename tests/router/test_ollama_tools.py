"""Ollama's `format` and `tools` as the OpenAI fields the engine implements, and the
engine's streamed tool calls back as Ollama's: the pure translations, and the refusals
of what cannot be honoured, on the real router app without a model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.errors import BadRequest, NotImplementedParam
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.ollama import request as rq
from juggler.router.ollama import wire as ol
from juggler.router.ollama.answer import OllamaAnswer
from juggler.router.ollama.messages import (
    Message,
    ToolCalls,
    format_fields,
    ollama_param,
    openai_messages,
)

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_format_json_is_any_object_and_a_schema_is_held_to() -> None:
    """Ollama: "`format`: the format to return a response in. Format can be `json` or a
    JSON schema"."""
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}}
    assert format_fields("json", raw=False) == {
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
    }
    assert format_fields(schema, raw=False)["response_format"]["json_schema"]["schema"] == schema
    assert format_fields(schema, raw=True) == {"json_schema": schema}  # completions
    assert format_fields("", raw=False) == format_fields(None, raw=False) == {}
    with pytest.raises(BadRequest, match="format"):
        format_fields("yaml", raw=False)


def test_backend_errors_name_format_not_the_openai_field() -> None:
    assert ollama_param("response_format.json_schema.schema: bad") == "format: bad"
    assert ollama_param("json_schema: bad") == "format: bad"
    assert ollama_param("tools.0.function.parameters: bad") == "tools.0.function.parameters: bad"


def _messages(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return openai_messages([Message.model_validate(m) for m in raw])


def test_tool_calls_and_results_become_openai_messages_paired_by_id() -> None:
    """Ollama's calls carry their arguments as an object and no id; results name the
    tool (`tool_name`). Each result answers the earliest open call of its tool."""
    out = _messages(
        [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "get_time", "arguments": {"city": "Rome"}}},
                    {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
                ],
            },
            {"role": "tool", "tool_name": "get_weather", "content": "Sunny"},
            {"role": "tool", "tool_name": "get_weather", "content": "Rainy"},
            {"role": "tool", "content": "12:00"},
        ]
    )
    calls = out[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time", "get_weather"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert {c["type"] for c in calls} == {"function"}
    assert len({c["id"] for c in calls}) == 3
    assert out[2] == {
        "role": "tool",
        "content": "Sunny",
        "tool_call_id": calls[0]["id"],
        "name": "get_weather",
    }
    assert out[3]["tool_call_id"] == calls[2]["id"]  # the next open get_weather call
    assert out[4]["tool_call_id"] == calls[1]["id"]  # no name: the earliest open call


def test_ids_sent_back_are_kept() -> None:
    out = _messages(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "function": {"index": 0, "name": "f", "arguments": '{"x": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_abc", "content": "done"},
        ]
    )
    assert out[0]["tool_calls"][0]["id"] == "call_abc"
    assert out[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert out[1]["tool_call_id"] == "call_abc"


def test_chat_request_carries_tools_and_format() -> None:
    body = ol.ChatBody.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]}
    )
    assert rq.chat_request(body)["tools"] == [WEATHER]
    body = ol.ChatBody.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "format": "json"}
    )
    assert rq.chat_request(body)["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    ("extra", "named", "why"),
    [
        ({"format": "json", "tools": [WEATHER]}, "format", "calls tools or answers"),
        ({"think": "loudly"}, "think", "true, false or one of"),
        ({"messages": [{"role": "user", "content": "x", "images": [3]}]}, "images", "base64"),
        ({"messages": [{"role": "user", "thinking": "hm"}]}, "thinking", "only assistant"),
        ({"messages": [{"role": "user", "tool_name": "f"}]}, "tool_name", "tool messages"),
        ({"logprobs": True}, "logprobs", "not built"),
    ],
)
def test_what_cannot_be_honoured_is_refused_saying_why(
    extra: dict[str, Any], named: str, why: str
) -> None:
    body = ol.ChatBody.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    )
    with pytest.raises(BadRequest, match=why) as caught:
        rq.chat_request(body)
    assert named in caught.value.message


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("suffix", "end", "fill-in-the-middle"),
        ("context", [1, 2], "token contexts"),
    ],
)
def test_generate_refuses_what_it_cannot_honour(field: str, value: Any, why: str) -> None:
    body = ol.GenerateBody.model_validate({"model": "m", "prompt": "x", field: value})
    with pytest.raises(NotImplementedParam, match=why):
        rq.generate_request(body)


def test_generate_takes_images_unless_raw() -> None:
    """Issue 51: Ollama's `images` (base64) become OpenAI image parts before the text;
    a raw prompt has no place for them."""
    _, chat = rq.generate_request(ol.GenerateBody(model="m", prompt="x", images=["aGk="]))
    assert chat["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:application/octet-stream;base64,aGk="}},
        {"type": "text", "text": "x"},
    ]
    with pytest.raises(NotImplementedParam, match="raw"):
        rq.generate_request(ol.GenerateBody(model="m", prompt="x", raw=True, images=["aGk="]))


def test_generate_maps_format_for_chat_and_raw_prompts() -> None:
    _, chat = rq.generate_request(ol.GenerateBody(model="m", prompt="x", format="json"))
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object"}
    path, raw = rq.generate_request(ol.GenerateBody(model="m", prompt="x", raw=True, format="json"))
    assert path == "/v1/completions" and raw["json_schema"] == {"type": "object"}


def _start(index: int, name: str) -> dict[str, Any]:
    fn = {"name": name, "arguments": ""}
    return {"index": index, "id": f"call_{index}", "type": "function", "function": fn}


def _args(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


def test_streamed_calls_come_whole_when_the_next_starts_or_the_answer_ends() -> None:
    calls = ToolCalls()
    assert calls.feed([_start(0, "get_weather")]) == []
    assert calls.feed([_args(0, '{"city": ')]) == []
    assert calls.feed([_args(0, '"Paris"}')]) == []
    (first,) = calls.feed([_start(1, "get_time")])
    assert first == {
        "id": "call_0",
        "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}},
    }
    calls.feed([_args(1, "{}")])
    (second,) = calls.finish()
    assert second["function"] == {"index": 1, "name": "get_time", "arguments": {}}
    assert calls.finish() == [] and calls.leftover == ""


def test_a_call_cut_short_by_the_token_limit_stays_text() -> None:
    calls = ToolCalls()
    calls.feed([_start(0, "get_weather"), _args(0, '{"city": "Pa')])
    assert calls.finish() == []
    assert calls.leftover == '{"name": "get_weather", "arguments": {"city": "Pa'


async def _events(chunks: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for c in chunks:
        yield c


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_streamed_answer_sends_each_call_as_one_ndjson_line() -> None:
    """Ollama streams a tool call whole, in `message.tool_calls`, arguments an object."""
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"tool_calls": [_start(0, "get_weather")]}),
        _chunk({"tool_calls": [_args(0, '{"city": "Paris"}')]}),
        _chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 9}},
    ]
    answer = OllamaAnswer("m", True, 0.0)

    async def read() -> list[dict[str, Any]]:
        return [json.loads(b) async for b in answer.ndjson(_events(chunks))]

    lines = asyncio.run(read())
    assert len(lines) == 2
    call, last = lines
    assert call["done"] is False and call["message"]["content"] == ""
    assert call["message"]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert last["done"] is True and last["done_reason"] == "stop"
    assert (last["prompt_eval_count"], last["eval_count"]) == (7, 9)
    assert "tool_calls" not in last["message"]


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model=""), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_refusals_are_ollama_shaped_400s_before_any_model_loads(client: TestClient) -> None:
    base = {"model": "SmolLM2-135M-Instruct-GGUF", "stream": False}
    ask = [{"role": "user", "content": "hi"}]
    for body, named in [
        ({"messages": ask, "think": "much"}, "think"),
        ({"messages": ask, "format": "json", "tools": [WEATHER]}, "format"),
        ({"messages": ask, "format": 3}, "format"),
        ({"messages": ask, "tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools"),
        ({"messages": [{**ask[0], "images": [3]}]}, "images"),
    ]:
        r = client.post("/api/chat", json={**base, **body})
        assert r.status_code == 400, body
        assert named in r.json()["error"], r.json()
    assert client.get("/api/ps").json() == {"models": []}
