"""The backend's HTTP contract against a real SmolLM2 backend process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.conftest import Backend, free_port

pytestmark = pytest.mark.slow


def sse_events(resp: httpx.Response) -> list[Any]:
    out: list[Any] = []
    for line in resp.iter_lines():
        if not line.startswith("data: "):
            continue
        payload = line[len("data: ") :]
        out.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
    return out


def test_health_reports_the_contract_fields(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        h = c.get("/health").json()
    assert h["status"] == "ok" and h["model"] == "smol" and h["type"] == "llm"
    assert h["device"] == "cpu" and h["workers"] == 1 and h["parallel"] == 16
    assert h["ctx_size"] == 8192 and h["pid"] == smol_backend.proc.pid


def test_chat_completion_shape_usage_and_length_finish(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        r = c.post(
            "/v1/chat/completions",
            json={
                "model": "smol",
                "messages": [{"role": "user", "content": "Count to twenty."}],
                "max_tokens": 5,
                "temperature": 0,
            },
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "smol"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    u = body["usage"]
    assert u["completion_tokens"] == 5
    assert u["total_tokens"] == u["prompt_tokens"] + 5 and u["prompt_tokens"] > 10


def test_chat_stream_chunks_finish_usage_and_done(smol_backend: Backend) -> None:
    req = {
        "model": "smol",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with smol_backend.client() as c, c.stream("POST", "/v1/chat/completions", json=req) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] <= 8
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] in ("stop", "length")
    text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks[:-2])
    assert text.strip()


def test_completions_accept_list_prompt_and_stop_strings(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        free = c.post(
            "/v1/completions", json={"prompt": ["1, 2, 3, 4,"], "max_tokens": 12, "temperature": 0}
        ).json()
        text = free["choices"][0]["text"]
        assert free["object"] == "text_completion"
        assert "," in text
        cut = c.post(
            "/v1/completions",
            json={"prompt": "1, 2, 3, 4,", "max_tokens": 12, "temperature": 0, "stop": ","},
        ).json()
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["text"] == text.split(",")[0]


def test_stream_completion_chunks(smol_backend: Backend) -> None:
    req = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": True}
    with smol_backend.client() as c, c.stream("POST", "/v1/completions", json=req) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert all(e["object"] == "text_completion" for e in events[:-1])


def test_validation_errors_are_openai_shaped(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        r = c.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "n": 17}
        )
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "n" in err["message"]
        assert c.post("/v1/chat/completions", json={"messages": []}).status_code == 400
        r = c.post("/v1/embeddings", json={"input": "hi"})
        assert r.status_code == 400 and "not an embedding model" in r.json()["error"]["message"]
        assert c.post("/v1/rerank", json={"query": "q", "documents": ["d"]}).status_code == 400
        r = c.post("/v1/sessions/nope/generate", json={"max_new_tokens": 2})
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"


def test_prompt_longer_than_the_context_is_refused(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        r = c.post("/v1/completions", json={"prompt": "hello " * 9000, "max_tokens": 2})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_metrics_expose_gateway_series(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
        text = c.get("/metrics").text
    for name in (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "juggler:prompt_tokens_prefilled_total",
        "juggler:prompt_tokens_reused_total",
        "juggler:generation_tokens_total",
    ):
        assert f"\n{name} " in text or text.startswith(f"{name} "), name
    usage = [ln for ln in text.splitlines() if ln.startswith("vllm:kv_cache_usage_perc ")]
    assert 0.0 < float(usage[0].split()[1]) <= 1.0


def test_openai_sdk_talks_to_the_backend(smol_backend: Backend) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{smol_backend.url}/v1", api_key="x")
    out = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert out.choices[0].message.content is not None and out.usage is not None
    stream = client.completions.create(model="smol", prompt="A", max_tokens=3, stream=True)
    texts = [ch.choices[0].text for ch in stream if ch.choices]
    assert texts
    client.close()


def test_unknown_argument_exits_quickly_with_a_message(smol_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "juggler.engine",
            "--model-path",
            str(smol_path),
            "--model-name",
            "x",
            "--port",
            str(free_port()),
            "--bogus",
            "1",
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode != 0 and b"--bogus" in r.stderr


def test_unloadable_model_exits_non_zero_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "juggler.engine",
            "--model-path",
            str(bad),
            "--model-name",
            "x",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode != 0 and b"cannot load" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "juggler.engine",
            "--model-path",
            str(tmp_path / "missing.gguf"),
            "--model-name",
            "x",
            "--port",
            "1",
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode != 0 and b"not found" in r.stderr


def wait_idle(backend: Backend, deadline_s: float) -> dict[str, object]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        stats = backend.stats()
        if stats["requests_running"] == 0:
            return stats
        time.sleep(0.05)  # polling interval
    raise AssertionError(f"generation still running after {deadline_s}s")


def test_client_disconnect_cancels_the_generation(smol_backend: Backend) -> None:
    req = {"prompt": "Write forever:", "max_tokens": 3000, "ignore_eos": True, "stream": True}
    with smol_backend.client() as c, c.stream("POST", "/v1/completions", json=req) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["text"]:
                break
    stats = wait_idle(smol_backend, 10.0)  # 3000 tokens would take far longer
    out = stats["output_tokens"]
    assert isinstance(out, int) and out < 3000


def test_non_streaming_client_disconnect_cancels_too(smol_backend: Backend) -> None:
    req = {"prompt": "Write forever:", "max_tokens": 3000, "ignore_eos": True}
    with (
        httpx.Client(base_url=smol_backend.url, timeout=0.5) as c,
        pytest.raises(httpx.ReadTimeout),
    ):
        c.post("/v1/completions", json=req)
    stats = wait_idle(smol_backend, 10.0)
    out = stats["output_tokens"]
    assert isinstance(out, int) and out < 3000
