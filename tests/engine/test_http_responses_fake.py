"""The backend's Responses API on the fake model: a continuation appends only its input
to the session that holds the conversation, a branch starts a new one, and a stream
sends the API's events. Milliseconds; tests/router/test_responses_api.py runs the real
model through the openai package."""

from __future__ import annotations

from juggler.engine.structured.tools import generic_calls_text
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
