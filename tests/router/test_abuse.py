"""Issue 27 on a real model: a grammar that explodes (an ambiguous pattern) ends with a
clear 400 instead of wedging the model, and a normal chat beside it is answered."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer

pytestmark = pytest.mark.slow

BOMB = "^(a|aa|aaa|a?){1,1000}(b|c)*$"


def test_an_ambiguous_pattern_is_stopped_and_others_are_served(
    chat_server: RunningServer,
) -> None:
    """Issue 27: "A chat with response_format json_schema whose string has pattern
    `^(a|aa|aaa|a?){1,1000}(b|c)*$` never answers" and blocked the model for minutes."""
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": BOMB}},
        "required": ["s"],
    }
    bomb = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Write many a letters."}],
        "max_tokens": 64,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
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
    r = got["bomb"]
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "grammar_too_complex"
    with httpx.Client(timeout=600) as c:  # and the model still answers afterwards
        assert c.post(chat_server.base_url + "/v1/chat/completions", json=normal).status_code == 200
