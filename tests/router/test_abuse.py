"""Issue 27 on a real model: a grammar that explodes ends with a clear 400 instead of
wedging the model, and a normal chat beside it is answered. The issue's pattern is
refused before anything is compiled (`structured.ambiguity`); an ambiguous grammar that
the static check lets through is stopped by the per-step budget of the sampler."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer

pytestmark = pytest.mark.slow

BOMB = "^(a|aa|aaa|a?){1,1000}(b|c)*$"


#: 64 ambiguous stars and one more "a": the static check lets it through (nothing
#: repeated can be empty), and a step that must look past the model's first draw goes
#: through thousands of grammar stacks for every token that starts with "a" (about 2 s
#: over the whole vocabulary for 50 stars on SmolLM2's).
SLOW_GBNF = "root ::= " + " ".join(['("a" | "a")*'] * 64) + ' "a"'


def bomb_beside_a_chat(chat_server: RunningServer, extra: dict[str, Any]) -> httpx.Response:
    bomb = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Write many a letters."}],
        "max_tokens": 64,
        **extra,
    }
    got: dict[str, Any] = {}

    def send_bomb() -> None:
        with httpx.Client(timeout=600) as c:
            got["bomb"] = c.post(chat_server.base_url + "/v1/chat/completions", json=bomb)

    t = threading.Thread(target=send_bomb)
    t.start()
    normal = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 8,
    }
    with httpx.Client(timeout=600) as c:
        assert c.post(chat_server.base_url + "/v1/chat/completions", json=normal).status_code == 200
    t.join(timeout=600)
    with httpx.Client(timeout=600) as c:  # and the model still answers afterwards
        assert c.post(chat_server.base_url + "/v1/chat/completions", json=normal).status_code == 200
    return got["bomb"]


def test_an_ambiguous_pattern_is_refused_and_others_are_served(
    chat_server: RunningServer,
) -> None:
    """Issue 27: "A chat with response_format json_schema whose string has pattern
    `^(a|aa|aaa|a?){1,1000}(b|c)*$` never answers" and blocked the model for minutes."""
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": BOMB}},
        "required": ["s"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    r = bomb_beside_a_chat(chat_server, {"response_format": fmt})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "grammar_too_complex"
    assert "empty string" in r.json()["error"]["message"]


def test_a_grammar_too_slow_to_follow_is_stopped_after_one_step(
    chat_server: RunningServer,
) -> None:
    """Issue 27: "A GBNF grammar of 50 `("a"|"a")*` made 8 tokens take 11 s and a
    concurrent chat 9.6 s"; "a slow grammar step holds the others' decoding for a
    bounded slice only (... a per-step budget)"."""
    r = bomb_beside_a_chat(chat_server, {"grammar": SLOW_GBNF})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "grammar_too_complex"
    assert "for one token" in r.json()["error"]["message"]
