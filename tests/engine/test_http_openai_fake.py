"""The backend's OpenAI routes on the fake model: choices, logprobs, stop strings across
tokens in a stream, tool calls as messages and as streamed deltas, and the parameters
that are refused. Milliseconds; the real model's behaviour is pinned in
tests/router/test_openai_sdk.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.server import create_app
from juggler.engine.runtime import Engine
from juggler.engine.structured.tools import generic_calls_text
from juggler.options import EngineFlags
from tests.engine.fake_llama import BOS, FakeLlama, greedy, text_of
from tests.engine.test_http_fake import sse

USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def client(fake: FakeLlama | None = None) -> TestClient:
    config = EngineConfig("fake.gguf", "fake", flags=EngineFlags(threads=1, ctx_size=4096))
    return TestClient(create_app(Engine(config, fake or FakeLlama())))


def chat_prompt(c: TestClient) -> list[int]:
    """The fake's tokens of the ChatML prompt for USER."""
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    return [BOS, *text.encode()]


def test_n_choices_come_back_with_their_indices_and_usage_counts_the_prompt_once() -> None:
    with client() as c:
        body = {"messages": USER, "max_tokens": 4, "n": 3, "seed": 5}
        r = c.post("/v1/chat/completions", json=body).json()
        assert [ch["index"] for ch in r["choices"]] == [0, 1, 2]
        expected = text_of(greedy(chat_prompt(c), 4))
        assert [ch["message"]["content"] for ch in r["choices"]] == [expected] * 3
        assert r["usage"]["completion_tokens"] == 12
        assert r["usage"]["prompt_tokens"] == len(chat_prompt(c))
        events = sse(c.post("/v1/chat/completions", json={**body, "stream": True}).text)
        chunks = [e for e in events if e != "[DONE]"]
        for i in range(3):
            mine = [ch["choices"][0] for ch in chunks if ch["choices"][0]["index"] == i]
            assert "".join(d["delta"].get("content", "") for d in mine) == expected
            assert mine[-1]["finish_reason"] == "length"


def test_chat_logprobs_name_the_chosen_token_first_among_its_rivals() -> None:
    with client() as c:
        body = {"messages": USER, "max_tokens": 3, "logprobs": True, "top_logprobs": 2}
        choice = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        content = choice["logprobs"]["content"]
        assert "".join(e["token"] for e in content) == choice["message"]["content"]
        for e in content:
            assert e["top_logprobs"][0]["token"] == e["token"]
            assert e["top_logprobs"][0]["logprob"] == e["logprob"] < 0
            assert bytes(e["bytes"]).decode() == e["token"]
        events = sse(c.post("/v1/chat/completions", json={**body, "stream": True}).text)
        streamed = [
            e2
            for e in events[:-1]
            if e["choices"] and e["choices"][0]["logprobs"]
            for e2 in e["choices"][0]["logprobs"]["content"]
        ]
        assert streamed == content
        plain = c.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
        assert plain.json()["choices"][0]["logprobs"] is None


def test_completion_logprobs_in_the_legacy_shape() -> None:
    with client() as c:
        body = {"prompt": "ab", "max_tokens": 3, "logprobs": 2}
        choice = c.post("/v1/completions", json=body).json()["choices"][0]
        lp = choice["logprobs"]
        assert "".join(lp["tokens"]) == choice["text"]
        assert lp["text_offset"] == [0, 1, 2]
        assert all(len(top) == 2 for top in lp["top_logprobs"])


def test_a_stop_string_split_across_tokens_never_reaches_the_stream() -> None:
    with client() as c:
        full = text_of(greedy(chat_prompt(c), 12))
        stop = full[5:8]  # three one-byte tokens
        body = {"messages": USER, "max_tokens": 12, "stop": [stop], "stream": True}
        events = sse(c.post("/v1/chat/completions", json=body).text)
        pieces = [e["choices"][0]["delta"].get("content", "") for e in events[:-1]]
        assert "".join(pieces) == full[: full.index(stop)]
        assert all(stop[0] not in p or p.index(stop[0]) < full.index(stop) for p in pieces)
        assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_a_choice_ended_by_a_stop_string_names_it_as_stop_reason() -> None:
    """The backend names the stop string that ended a choice (`stop_reason`, as vLLM
    does), so that the Anthropic dialect can answer `stop_sequence` (issue 24)."""
    with client() as c:
        full = text_of(greedy(chat_prompt(c), 12))
        stop = full[5:8]
        body = {"messages": USER, "max_tokens": 12, "stop": ["never there", stop]}
        choice = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
        events = sse(c.post("/v1/chat/completions", json={**body, "stream": True}).text)
        assert events[-2]["choices"][0]["stop_reason"] == stop
        assert all("stop_reason" not in e["choices"][0] for e in events[:-2])
        plain = c.post("/v1/chat/completions", json={**body, "stop": ["never there"]}).json()
        assert "stop_reason" not in plain["choices"][0]


def test_tool_calls_come_back_as_a_message_and_as_streamed_deltas() -> None:
    script = generic_calls_text([("get_weather", {"city": "Paris"})]).encode()
    body = {"messages": USER, "tools": [WEATHER], "tool_choice": "required"}
    with client(FakeLlama(script=script)) as c:
        choice = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        (call,) = choice["message"]["tool_calls"]
        assert choice["message"]["content"] is None
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        events = sse(c.post("/v1/chat/completions", json={**body, "stream": True}).text)
        deltas = [e["choices"][0]["delta"] for e in events[:-1]]
        calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
        assert calls[0]["index"] == 0 and calls[0]["function"]["name"] == "get_weather"
        assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
        args = "".join(d["function"]["arguments"] for d in calls)
        assert json.loads(args) == {"city": "Paris"}
        assert all("id" not in d for d in calls[1:])
        assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_auto_tool_choice_lets_plain_text_through() -> None:
    with client(FakeLlama(script=b"Sunny.")) as c:
        body = {"messages": USER, "tools": [WEATHER]}
        choice = c.post("/v1/chat/completions", json=body).json()["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": "Sunny."}
        assert choice["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"functions": []}, "functions"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": -1}, "max_completion_tokens"),
        ({"stream_options": {"include_usage": True}}, None),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"grammar": "no rules here"}, "grammar"),
        ({"grammar": "root ::= x", "json_schema": {}}, "json_schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "tools"),
        ({"tool_choice": "required"}, None),
        ({"top_logprobs": 2}, None),
        ({"store": True}, None),
        ({"messages": [{"role": "user", "content": "x", "audio": {}}]}, "messages.0.audio"),
    ],
)
def test_what_is_not_implemented_is_refused_naming_it(body: dict[str, Any], param: Any) -> None:
    with client() as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2, **body})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error"
        if param is not None:
            assert err["param"] == param, err
        if param in ("functions", "messages.0.audio"):
            assert err["code"] == "unsupported_parameter"
