"""The backend's Responses API on the fake model: a continuation appends only its input
to the session that holds the conversation, a branch starts a new one, and a stream
sends the API's events. Milliseconds; tests/router/test_responses_api.py runs the real
model through the openai package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.api.openai import ChatMessage
from juggler.api.structured import FunctionCall, ToolCall
from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.response_fit import fit_turns
from juggler.engine.http.server import create_app
from juggler.engine.runtime import Engine
from juggler.engine.structured.tools import generic_calls_text
from juggler.errors import ContextOverflow
from juggler.options import EngineFlags
from tests.engine.fake_llama import FakeLlama
from tests.engine.test_http_fake import sse
from tests.engine.test_http_openai_fake import client

RID = "resp_" + "a" * 32


def test_a_continuation_prefills_only_its_input_and_a_branch_starts_anew() -> None:
    with client() as c:
        ask = {"input": "hi", "max_output_tokens": 3, "temperature": 0}
        first = c.post("/v1/responses", json=ask, headers={"x-juggler-response-id": RID}).json()
        assert first["id"] == RID and first["status"] == "incomplete"
        assert first["incomplete_details"] == {"reason": "max_output_tokens"}
        held = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
        second = c.post("/v1/responses", json={**ask, "previous_response_id": RID}).json()
        cached = second["usage"]["input_tokens_details"]["cached_tokens"]
        assert cached == held - 1, "all but the last sampled token, never decoded"
        branch = c.post("/v1/responses", json={**ask, "previous_response_id": RID}).json()
        assert branch["usage"]["input_tokens_details"]["cached_tokens"] == 0
        assert branch["usage"]["input_tokens"] == second["usage"]["input_tokens"]
        assert c.get(f"/v1/responses/{RID}").json()["output"] == first["output"]
        assert c.delete(f"/v1/responses/{RID}").json()["deleted"] is True
        gone = c.get(f"/v1/responses/{RID}")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "response_not_found"


def test_a_streamed_function_call() -> None:
    script = generic_calls_text([("f", {"a": 1})]).encode()
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    with client(FakeLlama(script=script)) as c:
        body = {"input": "hi", "tools": [tool], "tool_choice": "required", "stream": True}
        events = sse(c.post("/v1/responses", json=body).text)
        kinds = [e["type"] for e in events]
        assert kinds[:3] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
        ]
        assert kinds[-3:] == [
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
        (item,) = events[-1]["response"]["output"]
        assert item["type"] == "function_call" and item["name"] == "f"
        assert item["arguments"] == '{"a": 1}' and item["call_id"].startswith("call_")


def small_client(ctx_size: int) -> TestClient:
    config = EngineConfig("fake.gguf", "fake", flags=EngineFlags(threads=1, ctx_size=ctx_size))
    return TestClient(create_app(Engine(config, FakeLlama())))


def test_metadata_and_neutral_hints_are_echoed_on_the_response() -> None:
    """Issue 24: `metadata` (echo back); `prompt_cache_key` / `safety_identifier` /
    `user` / `service_tier: "auto"` are neutral hints."""
    with client() as c:
        body = {
            "input": "hi",
            "max_output_tokens": 2,
            "metadata": {"run": "7"},
            "include": [],
            "store": False,
            "truncation": "disabled",
            "prompt_cache_key": "k",
            "safety_identifier": "s",
            "service_tier": "auto",
            "reasoning": {"effort": "none"},
        }
        r = c.post("/v1/responses", json=body, headers={"x-juggler-response-id": RID}).json()
        assert r["metadata"] == {"run": "7"} and r["store"] is False
        assert r["truncation"] == "disabled" and r["service_tier"] == "default"
        assert r["prompt_cache_key"] == "k" and r["safety_identifier"] == "s"
        assert c.get(f"/v1/responses/{RID}").status_code == 404, "store: false keeps nothing"


def test_truncation_auto_drops_the_oldest_items_and_disabled_refuses() -> None:
    """Issue 24: truncation "auto" may mean drop oldest input items to fit; "disabled" =
    error when too long. The fake's tokens are bytes: 300 of them cannot fit 256 (each
    request on a fresh engine, so that no stored response holds KV cells)."""
    long = [
        {"role": "user", "content": "a" * 150},
        {"role": "assistant", "content": "b" * 150},
        {"role": "user", "content": "say c"},
    ]

    def post(**fields: Any) -> dict[str, Any]:
        with small_client(256) as c:
            ask = {"input": long, "max_output_tokens": 8, "temperature": 0, **fields}
            data: dict[str, Any] = c.post("/v1/responses", json=ask).json()
            return data

    refused = post(truncation="disabled")
    assert refused["error"]["code"] == "context_length_exceeded"
    cut = post(truncation="auto")
    assert cut["status"] in ("completed", "incomplete") and cut["truncation"] == "auto"
    used = cut["usage"]["input_tokens"]
    assert used + 8 <= 256, "the prompt and the output allowance fit the context"
    kept = post(input=long[-1:])["usage"]["input_tokens"]
    assert used > kept + 150, "the assistant item was kept: only as much as needed went"
    assert used < kept + 300, "the oldest item was dropped"
    huge = post(input="x" * 400, truncation="auto")
    assert huge["error"]["code"] == "context_length_exceeded"
    assert huge["error"]["param"] == "input"


def test_include_logprobs_fills_the_output_text_and_its_deltas() -> None:
    """Issue 24: `include` (empty list, or values we can honour):
    "message.output_text.logprobs" with `top_logprobs` returns them."""
    with client() as c:
        ask = {
            "input": "hi",
            "max_output_tokens": 3,
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 2,
        }
        r = c.post("/v1/responses", json=ask).json()
        part = r["output"][0]["content"][0]
        assert len(part["logprobs"]) == 3 and r["top_logprobs"] == 2
        assert "".join(e["token"] for e in part["logprobs"]) == part["text"]
        for e in part["logprobs"]:
            assert len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
        plain = c.post("/v1/responses", json={**ask, "include": [], "top_logprobs": None})
        assert plain.json()["output"][0]["content"][0]["logprobs"] == []
        events = sse(c.post("/v1/responses", json={**ask, "stream": True}).text)
        deltas = [e for e in events if e["type"] == "response.output_text.delta"]
        assert sum(len(e["logprobs"]) for e in deltas) == 3
        (done,) = [e for e in events if e["type"] == "response.output_text.done"]
        assert done["logprobs"] == [lp for e in deltas for lp in e["logprobs"]]


def test_stream_options_include_obfuscation_pads_only_the_deltas() -> None:
    """stream_options.include_obfuscation (API: "adds random characters to an
    `obfuscation` field on streaming delta events"): true adds it, false does not."""
    with client() as c:
        ask = {"input": "hi", "max_output_tokens": 3, "stream": True}
        on = sse(
            c.post(
                "/v1/responses", json={**ask, "stream_options": {"include_obfuscation": True}}
            ).text
        )
        padded = [e for e in on if "obfuscation" in e]
        assert padded and all(e["type"].endswith(".delta") for e in padded)
        assert all(isinstance(e["obfuscation"], str) and e["obfuscation"] for e in padded)
        off = sse(
            c.post(
                "/v1/responses", json={**ask, "stream_options": {"include_obfuscation": False}}
            ).text
        )
        assert not [e for e in off if "obfuscation" in e]


def test_allowed_tools_required_calls_an_allowed_function() -> None:
    script = generic_calls_text([("g", {"a": 1})]).encode()
    tools = [
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "function", "name": "g", "parameters": {"type": "object"}},
    ]
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "g"}],
    }
    with client(FakeLlama(script=script)) as c:
        r = c.post("/v1/responses", json={"input": "hi", "tools": tools, "tool_choice": choice})
        (item,) = r.json()["output"]
        assert item["type"] == "function_call" and item["name"] == "g"
        assert r.json()["tool_choice"] == choice


def test_fit_turns_keeps_the_longest_suffix_without_orphaned_tool_results() -> None:
    """OpenAI: truncation "auto" drops "items from the beginning of the conversation";
    a tool result whose call went goes too."""
    call = ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}"))
    turns = [
        ChatMessage(role="user", content="u" * 10),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content="t" * 10, tool_call_id="c1"),
        ChatMessage(role="user", content="v" * 10),
    ]

    def size(kept: Sequence[ChatMessage]) -> int:
        return sum(10 if m.role != "assistant" else 5 for m in kept)

    assert fit_turns(turns, size, 35) == turns
    assert fit_turns(turns, size, 25) == turns[1:]
    assert fit_turns(turns, size, 20) == turns[3:], "the tool result went with its call"
    assert fit_turns(turns, size, 10) == turns[3:]
    with pytest.raises(ContextOverflow):
        fit_turns(turns, size, 9)
