"""Issue 49: a reasoning model's thinking in each dialect's own form, pure parts: Ollama's
`think` and `thinking`, Anthropic's `thinking` request field, `thinking` blocks and
`thinking_delta` events, from the backend's `reasoning_content` deltas."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from juggler.errors import BadRequest
from juggler.router.anthropic import request as arq
from juggler.router.anthropic import wire as an
from juggler.router.anthropic.answer import MessageEvents, fold, signature
from juggler.router.ollama import request as rq
from juggler.router.ollama import wire as ol
from juggler.router.ollama.answer import OllamaAnswer

ASK = [{"role": "user", "content": "hi"}]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


CHUNKS = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Let me "}),
    chunk({"reasoning_content": "see."}),
    chunk({"content": "Paris"}),
    chunk({}, "stop"),
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}},
]


async def events(items: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for item in items:
        yield item


@pytest.mark.parametrize(
    ("think", "fields"),
    [
        (True, {"chat_template_kwargs": {"enable_thinking": True}}),
        (False, {"chat_template_kwargs": {"enable_thinking": False}}),
        ("high", {"reasoning_effort": "high"}),
        (None, {}),
    ],
)
def test_ollama_think_becomes_the_templates_switch_or_an_effort(think: Any, fields: Any) -> None:
    body = ol.ChatBody.model_validate({"model": "m", "messages": ASK, "think": think})
    out = rq.chat_request(body)
    assert {k: out[k] for k in fields} == fields
    assert "chat_template_kwargs" in out or "reasoning_effort" in out or think is None
    _, gen = rq.generate_request(ol.GenerateBody(model="m", prompt="x", think=think))
    assert {k: gen[k] for k in fields} == fields


def test_ollama_earlier_thinking_is_reasoning_content_and_raw_cannot_think() -> None:
    body = ol.ChatBody.model_validate(
        {
            "model": "m",
            "messages": [*ASK, {"role": "assistant", "content": "a", "thinking": "t"}, *ASK],
        }
    )
    assert rq.chat_request(body)["messages"][1]["reasoning_content"] == "t"
    with pytest.raises(BadRequest) as err:
        rq.generate_request(ol.GenerateBody(model="m", prompt="x", raw=True, think=True))
    assert err.value.param == "think"


def test_ollama_answers_carry_thinking_streamed_and_whole() -> None:
    async def lines(chat: bool) -> list[dict[str, Any]]:
        answer = OllamaAnswer("m", chat, 0.0)
        answer.from_chat = True  # /api/generate without raw is a chat in the backend
        return [json.loads(b) async for b in answer.ndjson(events(CHUNKS))]

    chat = asyncio.run(lines(True))
    assert [c["message"].get("thinking") for c in chat[:2]] == ["Let me ", "see."]
    assert chat[2]["message"] == {"role": "assistant", "content": "Paris"}
    generate = asyncio.run(lines(False))
    assert generate[0]["thinking"] == "Let me " and "thinking" not in generate[2]

    class Present:
        async def is_disconnected(self) -> bool:
            return False

    whole = asyncio.run(OllamaAnswer("m", True, 0.0).whole(events(CHUNKS), Present()))  # type: ignore[arg-type]
    assert whole["message"] == {"role": "assistant", "content": "Paris", "thinking": "Let me see."}


def prompt(**extra: Any) -> dict[str, Any]:
    body = an.MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 4096, "messages": ASK, **extra}
    )
    return arq.chat_body(body)


def test_anthropic_thinking_turns_it_on_and_off_as_anthropic_defaults() -> None:
    """Anthropic's default is no thinking."""
    assert prompt()["chat_template_kwargs"] == {"enable_thinking": False}
    on = prompt(thinking={"type": "enabled", "budget_tokens": 2048})
    assert on["chat_template_kwargs"] == {"enable_thinking": True}
    assert on["thinking_budget_tokens"] == 2048, "the budget is counted apart"
    assert "thinking_budget_tokens" not in prompt(thinking={"type": "adaptive"})
    assert prompt(thinking={"type": "adaptive"})["chat_template_kwargs"]["enable_thinking"]
    assert not prompt(thinking={"type": "disabled"})["chat_template_kwargs"]["enable_thinking"]
    with pytest.raises(BadRequest) as err:
        prompt(thinking={"type": "enabled", "budget_tokens": 8192})
    assert err.value.param == "thinking.budget_tokens", "under max_tokens"


def test_anthropic_thinking_blocks_of_earlier_turns_are_reasoning_content() -> None:
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "mull", "signature": "abc"},
            {"type": "text", "text": "Paris"},
        ],
    }
    out = prompt(messages=[*ASK, turn, *ASK])
    assert out["messages"][1] == {
        "role": "assistant",
        "content": "Paris",
        "reasoning_content": "mull",
    }
    redacted = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}
    with pytest.raises(BadRequest, match="redacted"):
        prompt(messages=[*ASK, redacted, *ASK])


def test_anthropic_answer_has_a_thinking_block_with_deltas_and_a_signature() -> None:
    answer = MessageEvents("m", 64)
    evs = [*answer.start()]
    for c in CHUNKS:
        evs += answer.feed(c)
    evs += answer.end()
    kinds = [(e["type"], e.get("delta", {}).get("type")) for e in evs]
    assert kinds[2:9] == [
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("content_block_start", None),
        ("content_block_delta", "text_delta"),
    ]
    message = fold(evs)
    assert message["content"] == [
        {"type": "thinking", "thinking": "Let me see.", "signature": signature("Let me see.")},
        {"type": "text", "text": "Paris"},
    ]
