"""Issue 27: "A request's cost is bounded before it reaches an engine: message count and
text size against the model's context (refused fast with context_length_exceeded,
without rendering 100,000 messages first)"."""

from __future__ import annotations

import httpx
import pytest

from juggler.router.core.admission import MAX_CHARS_PER_TOKEN, min_tokens, prompt_refusal
from tests.conftest import DEFAULT_MODEL, RunningServer


def test_the_bound_is_a_lower_bound_on_tokens() -> None:
    chat = "/v1/chat/completions"
    msgs = [
        {"role": "user", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "x" * 64}]},
    ]
    assert min_tokens(chat, {"messages": msgs}) == 2 + (5 + 64) // MAX_CHARS_PER_TOKEN
    assert min_tokens("/v1/completions", {"prompt": "y" * 320}) == 10
    assert min_tokens("/v1/embeddings", {"input": "z" * 10_000}) == 0
    assert prompt_refusal(chat, {"messages": msgs}, 4) is None
    refused = prompt_refusal(chat, {"messages": msgs * 3}, 4)
    assert refused is not None and refused.code == "context_length_exceeded"
    assert prompt_refusal(chat, {"messages": msgs * 3}, 0) is None  # unknown context


def test_session_inputs_and_responses_inputs_are_bounded_too() -> None:
    """A session's input and the Responses API's input are rendered by the backend too."""
    msgs = [{"role": "user", "content": "x" * 64}] * 10
    session = "/v1/sessions/s1/input"
    assert min_tokens(session, {"messages": msgs}) == 10 + 640 // MAX_CHARS_PER_TOKEN
    assert min_tokens(session, {"text": "y" * 3200}) == 100
    responses = "/v1/responses"
    assert min_tokens(responses, {"input": "z" * 320, "instructions": "w" * 320}) == 20
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q" * 96}]}
    ]
    assert min_tokens(responses, {"input": items * 4}) == 4 + 384 // MAX_CHARS_PER_TOKEN
    refused = prompt_refusal(responses, {"input": items * 400}, 1000)
    assert refused is not None and refused.param == "input"
    refused = prompt_refusal(session, {"messages": msgs * 200}, 1000)
    assert refused is not None and refused.param == "messages"


@pytest.mark.slow
def test_a_huge_chat_is_refused_at_once_and_a_normal_one_is_not_held_up(
    chat_server: RunningServer,
) -> None:
    """The refusal is the router's (its wording: a bound, not a count), so no backend
    rendered or tokenized the 5,000 messages; a normal chat right after is answered."""
    many = [{"role": "user", "content": "hi"}] * 5000  # ctx 2048: cannot fit
    with httpx.Client(base_url=chat_server.base_url, timeout=120) as c:
        r = c.post("/v1/chat/completions", json={"model": DEFAULT_MODEL, "messages": many})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert "needs at least 5312 tokens" in r.json()["error"]["message"]  # 5000 + 10000 // 32
        r = c.post("/api/chat", json={"model": DEFAULT_MODEL, "messages": many, "stream": False})
        assert r.status_code == 400 and "needs at least" in r.text
        normal = {
            "model": DEFAULT_MODEL,
            "messages": [{"role": "user", "content": "Say hi"}],
            "max_tokens": 8,
        }
        assert c.post("/v1/chat/completions", json=normal).status_code == 200
