"""Issue 4 through HTTP and the CLI: load/unload/pin/health/stats/internal routes.

Real router, real llama.cpp backends (SmolLM2 and Gemma 270M), one type slot for LLMs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, backend_headers, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("residency"), "--model", "", "--ctx-size", "512", "--parallel", "2"
    )
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(autouse=True)
def clean_slate(server: RunningServer) -> Iterator[None]:
    yield
    with server.client() as c:
        c.post("/internal/set", json={"max_loaded_models": 1})
        for m in server.health()["all_models_loaded"]:  # type: ignore[union-attr]
            c.post("/internal/pin", json={"model_name": m["model_name"], "pinned": False})
        c.post("/api/v1/unload", json={})


def loaded(server: RunningServer) -> dict[str, dict[str, Any]]:
    return {m["model_name"]: m for m in server.health()["all_models_loaded"]}  # type: ignore[union-attr]


def cli(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    port = server.base_url.rsplit(":", 1)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
    env["JUGGLER_HOME"] = str(server.home)
    env["JUGGLER_PORT"] = port
    return subprocess.run(
        [sys.executable, "-m", "juggler", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_unload_of_a_model_not_loaded_is_404(server: RunningServer) -> None:
    """Seed 000: "Return a 404 if `model_name` is not loaded." """
    with server.client() as c:
        r = c.post("/api/v1/unload", json={"model_name": DEFAULT_MODEL})
    assert r.status_code == 404
    assert r.json()["error"]["message"] == f"Model not loaded: {DEFAULT_MODEL}"


def test_load_fills_health_with_every_field(server: RunningServer) -> None:
    """Seed 000: all_models_loaded carries model_name, checkpoint, last_use, type, device,
    backend_url; issue 4 adds recipe, pid, pinned, status, is_busy and max_models."""
    with server.client() as c:
        r = c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 512})
        assert r.status_code == 200 and r.json()["status"] == "success", r.text
    health = server.health()
    assert health["model_loaded"] == DEFAULT_MODEL
    entry = loaded(server)[DEFAULT_MODEL]
    assert entry["type"] == "llm" and entry["recipe"] == "llamacpp"
    assert entry["device"] == "cpu"  # nothing is offloaded on these machines
    assert entry["pinned"] is False and entry["is_busy"] is False
    assert entry["status"] == "ready" and entry["pid"] > 0 and entry["last_use"] > 0
    assert entry["backend_url"].startswith("http://127.0.0.1:")
    with httpx.Client(timeout=5) as direct:
        # Issue 27: a backend answers its router only (its key), /health included.
        assert direct.get(entry["backend_url"] + "/health").status_code == 401
        key = backend_headers(entry["pid"])
        assert direct.get(entry["backend_url"] + "/health", headers=key).status_code == 200
        # Even with its key, a backend opens no adapter file the router did not register.
        stolen = {"prompt": "x", "juggler_adapter": {"id": "a", "path": "/etc/passwd"}}
        r = direct.post(entry["backend_url"] + "/v1/completions", json=stolen, headers=key)
        assert r.status_code == 403 and r.json()["error"]["param"] == "juggler_adapter"
    assert health["max_models"] == {
        "llm": 1,
        "embedding": 1,
        "reranking": 1,
        "audio": 1,
        "image": 1,
    }


def test_same_options_is_a_noop_and_other_options_reload(server: RunningServer) -> None:
    with server.client() as c:
        c.post(
            "/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 512}
        ).raise_for_status()
        pid = loaded(server)[DEFAULT_MODEL]["pid"]
        c.post(
            "/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 512}
        ).raise_for_status()
        assert loaded(server)[DEFAULT_MODEL]["pid"] == pid
        c.post(
            "/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 768}
        ).raise_for_status()
        entry = loaded(server)[DEFAULT_MODEL]
        assert entry["pid"] != pid
        assert entry["recipe_options"]["ctx_size"] == 768


def test_pinned_slot_refuses_a_load_with_409_until_unpinned(server: RunningServer) -> None:
    """Seed 002: "If all loaded models of a type are pinned and a request to load another
    model of that type is received, the load request fails with a 409 Conflict HTTP status
    containing a slots_pinned_error code." """
    with server.client() as c:
        c.post(
            "/api/v1/load", json={"model_name": DEFAULT_MODEL, "pinned": True}
        ).raise_for_status()
        assert loaded(server)[DEFAULT_MODEL]["pinned"] is True
        r = c.post("/api/v1/load", json={"model_name": GEMMA})
        assert r.status_code == 409 and r.json()["error"]["code"] == "slots_pinned_error"
        # an inference request that would auto-load is refused the same way
        r = c.post("/api/v1/completions", json={"model": GEMMA, "prompt": "x", "max_tokens": 1})
        assert r.status_code == 409
        assert set(loaded(server)) == {DEFAULT_MODEL}
        r = c.post("/internal/pin", json={"model_name": DEFAULT_MODEL, "pinned": False})
        assert r.status_code == 200 and r.json()["pinned"] is False
        c.post("/api/v1/load", json={"model_name": GEMMA}).raise_for_status()
    assert set(loaded(server)) == {GEMMA}


def test_pin_of_a_model_not_loaded_is_404(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post("/internal/pin", json={"model_name": GEMMA, "pinned": True})
    assert r.status_code == 404


def test_internal_set_raises_the_slot_count_at_run_time(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post("/internal/set", json={"max_loaded_models": [2]})
        assert r.status_code == 200, r.text
        assert c.get("/internal/config").json()["max_models"]["llm"] == 2
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).raise_for_status()
        c.post("/api/v1/load", json={"model_name": GEMMA}).raise_for_status()
        assert set(loaded(server)) == {DEFAULT_MODEL, GEMMA}
        r = c.post("/internal/set", json={"max_loaded_models": 0})
        assert r.status_code == 400 and "max_loaded_models" in r.json()["error"]["message"]


def test_unload_without_a_name_unloads_everything(server: RunningServer) -> None:
    """Seed 000: "When no `model_name` is provided, unload all WrappedServers." """
    with server.client() as c:
        c.post("/internal/set", json={"max_loaded_models": 2}).raise_for_status()
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).raise_for_status()
        c.post("/api/v1/load", json={"model_name": GEMMA}).raise_for_status()
        r = c.post("/api/v1/unload")
        assert r.status_code == 200 and sorted(r.json()["unloaded"]) == sorted(
            [DEFAULT_MODEL, GEMMA]
        )
    assert loaded(server) == {}


def test_stats_report_the_most_recent_request(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post(
            "/api/v1/chat/completions",
            json={
                "model": DEFAULT_MODEL,
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 8,
            },
        )
        r.raise_for_status()
        usage = r.json()["usage"]
        stats = c.get("/api/v1/stats").json()
    assert stats["input_tokens"] == usage["prompt_tokens"]
    assert stats["output_tokens"] == usage["completion_tokens"]
    assert stats["time_to_first_token"] > 0 and stats["tokens_per_second"] > 0


def test_bad_load_bodies_are_400(server: RunningServer) -> None:
    with server.client() as c:
        assert (
            c.post(
                "/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": "big"}
            ).status_code
            == 400
        )
        assert (
            c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "bogus": 1}).status_code
            == 400
        )
        assert c.post("/api/v1/load", json={"model_name": "nope"}).status_code == 404


def test_missing_file_is_404_and_evicts_nothing(server: RunningServer) -> None:
    """Seed 000: "Do not evict models if the WrappedServer failed to load because a file
    was not found on disk." """
    gone = server.home / "models" / "gone.gguf"  # inside a model directory: no admin key
    gone.parent.mkdir(parents=True, exist_ok=True)
    gone.write_bytes(b"GGUF")
    with server.client() as c:
        r = c.post("/api/v1/pull", json={"model_name": "user.gone", "checkpoint": str(gone)})
        assert r.status_code == 200, r.text
        gone.unlink()
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).raise_for_status()
        pid = loaded(server)[DEFAULT_MODEL]["pid"]
        r = c.post("/api/v1/load", json={"model_name": "user.gone"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "file_not_found"
    assert loaded(server)[DEFAULT_MODEL]["pid"] == pid


def test_cli_load_status_pin_unload(server: RunningServer) -> None:
    r = cli(server, "load", DEFAULT_MODEL, "--pinned", "--ctx-size", "512")
    assert r.returncode == 0, r.stderr
    assert f"Loaded model: {DEFAULT_MODEL}" in r.stdout
    r = cli(server, "status")
    assert DEFAULT_MODEL in r.stdout and "yes" in r.stdout
    # every llm slot is pinned: the CLI warns before it tries (seed 002), then the server says 409
    r = cli(server, "load", GEMMA)
    assert "pinned" in r.stderr and "warning" in r.stderr
    assert r.returncode == 1 and "409" in r.stderr
    assert cli(server, "unpin", DEFAULT_MODEL).returncode == 0
    assert loaded(server)[DEFAULT_MODEL]["pinned"] is False
    r = cli(server, "unload", DEFAULT_MODEL)
    assert r.returncode == 0 and f"Unloaded model: {DEFAULT_MODEL}" in r.stdout
    r = cli(server, "unload", DEFAULT_MODEL)
    assert r.returncode == 1 and "Model not loaded" in r.stderr
