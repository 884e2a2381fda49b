"""Issue 49, part 5, through a real router and a real backend slowed down (one thread,
32-token prefill steps): "Send SSE comment heartbeats (`: ping`) at a settable interval
until the first token, in every streaming dialect where the wire format allows a
comment ...; Ollama's NDJSON stream gets what Ollama sends. A test with a long prompt
on a slow worker sees the heartbeats and a client with a short read timeout survives."
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import anthropic
import httpx
import pytest
from openai import OpenAI

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": "Bearer hb-admin"}
#: The client's read timeout: far below the prefill of `long_prompt`.
SHORT = httpx.Timeout(120.0, read=1.0)
WORDS = [
    "river",
    "stone",
    "garden",
    "window",
    "silver",
    "morning",
    "quiet",
    "engine",
    "paper",
    "orange",
    "lantern",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {
        "JUGGLER_SSE_PING_INTERVAL_S": "0.2",
        "JUGGLER_LLAMACPP_ARGS": "--threads 1 --workers 1 --prefill-chunk 32",
        "JUGGLER_ADMIN_API_KEY": "hb-admin",
    }
    srv = start_server(
        tmp_path_factory.mktemp("hb"), "--model", DEFAULT_MODEL, "--ctx-size", "2048", env=env
    )
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield srv
    finally:
        srv.stop()


def long_prompt(seed: int) -> str:
    """About 800 tokens no earlier request began with (no cached prefix shortens it)."""
    rng = random.Random(seed)
    return f"{seed} " + " ".join(rng.choice(WORDS) for _ in range(800))


def test_a_raw_stream_sees_pings_before_the_first_token(server: RunningServer) -> None:
    body = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": long_prompt(1)}],
        "max_tokens": 4,
        "stream": True,
        "ignore_eos": True,
    }
    lines: list[str] = []
    with (
        httpx.Client(base_url=server.base_url, timeout=SHORT) as c,
        c.stream("POST", "/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    first = next(i for i, line in enumerate(lines) if '"content":"' in line and '""' not in line)
    assert lines[first - 1] == ": ping" and lines.count(": ping") >= 3
    assert lines[-1] == "data: [DONE]"


def test_published_clients_with_a_short_read_timeout_survive(server: RunningServer) -> None:
    """The `openai` client (chat and Responses) and the `anthropic` client, each reading
    with a 1-second timeout through a prefill of several seconds."""
    openai_client = OpenAI(
        base_url=server.base_url + "/v1", api_key="x", timeout=SHORT, max_retries=0
    )
    with openai_client as client:
        chat = client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[{"role": "user", "content": long_prompt(2)}],
            max_tokens=4,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        with chat:
            assert "".join(c.choices[0].delta.content or "" for c in chat if c.choices)
        events = client.responses.create(
            model=DEFAULT_MODEL, input=long_prompt(3), max_output_tokens=4, stream=True
        )
        with events:
            kinds = [e.type for e in events]
        assert kinds[-1] in ("response.completed", "response.incomplete")
    # A number is each of connect, read, write and pool (no total): a 1 s read timeout.
    claude = anthropic.Anthropic(base_url=server.base_url, api_key="x", timeout=1.0, max_retries=0)
    with (
        claude,
        claude.messages.stream(
            model=DEFAULT_MODEL,
            max_tokens=4,
            messages=[{"role": "user", "content": long_prompt(4)}],
        ) as stream,
    ):
        message = stream.get_final_message()
    assert message.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_pings_are_its_own_ping_events(server: RunningServer) -> None:
    body = {
        "model": DEFAULT_MODEL,
        "max_tokens": 4,
        "stream": True,
        "messages": [{"role": "user", "content": long_prompt(5)}],
    }
    with (
        httpx.Client(base_url=server.base_url, timeout=SHORT) as c,
        c.stream("POST", "/v1/messages", json=body) as r,
    ):
        names = [line for line in r.iter_lines() if line.startswith("event: ")]
    # Pings come while the prompt is read, before the answer's first block (or its end).
    first = next(
        i
        for i, n in enumerate(names)
        if n in ("event: content_block_start", "event: message_delta")
    )
    assert names[:first].count("event: ping") >= 3 and names[-1] == "event: message_stop"


def test_ollama_ndjson_gets_no_heartbeat_lines(server: RunningServer) -> None:
    """Ollama sends nothing while it reads a prompt, and NDJSON has no comments: every
    line is one JSON object, though the stream it translates was pinged."""
    body = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": long_prompt(6)}],
        "options": {"num_predict": 4},
    }
    with (
        httpx.Client(base_url=server.base_url, timeout=120) as c,
        c.stream("POST", "/api/chat", json=body) as r,
    ):
        lines = [line for line in r.iter_lines() if line]
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert json.loads(lines[-1])["done"] is True


def test_without_heartbeats_the_short_timeout_client_fails(server: RunningServer) -> None:
    """The setting takes effect at once; 0 turns the pings off, and then the same client
    times out (what the heartbeats are for)."""
    with httpx.Client(base_url=server.base_url, timeout=10) as c:
        r = c.post("/internal/set", json={"sse_ping_interval_s": 0}, headers=ADMIN)
        assert r.status_code == 200, r.text
        bad = c.post("/internal/set", json={"sse_ping_interval_s": -1}, headers=ADMIN)
        assert bad.status_code == 400 and "sse_ping_interval_s" in bad.text
    client = OpenAI(base_url=server.base_url + "/v1", api_key="x", timeout=SHORT, max_retries=0)
    try:
        with client, pytest.raises(Exception, match="timed out"):
            chat = client.chat.completions.create(
                model=DEFAULT_MODEL,
                messages=[{"role": "user", "content": long_prompt(7)}],
                max_tokens=4,
                stream=True,
            )
            with chat:
                for _ in chat:
                    pass
    finally:
        with httpx.Client(base_url=server.base_url, timeout=10) as c:
            c.post("/internal/set", json={"sse_ping_interval_s": 0.2}, headers=ADMIN)
