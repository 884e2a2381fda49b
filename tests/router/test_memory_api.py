"""Seed 002's dynamic memory management through the router, with real backends.

Issue 11, "Done when": "downsize after idle with an RSS drop of at least the KV cache's
size; a session continues after downsize with the same greedy output as without it;
requests rescue a downsized model and one being evicted; the weight factor protects a
slow-loading model under simulated pressure; pinned models are skipped; [...] a churn
test (loads, unloads, requests and pressure changes during downsizing, bounded in time)
ends with no failed request and no leaked process." And: "pins and per-model settings
survive a server restart"; `auto_evict` set over `POST /internal/set` takes effect
without a restart."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, start_server

pytestmark = pytest.mark.slow

#: SmolLM2-135M's KV cache per token (30 layers x 3 KV heads x 64 dims, K and V, f16).
KV_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 2
CTX = 8192


def entry(server: RunningServer, name: str) -> dict[str, Any] | None:
    models: list[dict[str, Any]] = server.health()["all_models_loaded"]  # type: ignore[assignment]
    return next((m for m in models if m["model_name"] == name), None)


def status_is(name: str, *wanted: str) -> Any:
    def check(h: dict[str, Any]) -> bool:
        return any(
            m["model_name"] == name and m["status"] in wanted for m in h["all_models_loaded"]
        )

    return check


def turn(c: httpx.Client, sid: str, text: str) -> str:
    r = c.post(f"/api/v1/sessions/{sid}/input", json={"text": text})
    assert r.status_code == 200, r.text
    parts = []
    body = {"max_new_tokens": 12, "temperature": 0}
    with c.stream("POST", f"/api/v1/sessions/{sid}/generate", json=body) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                parts.append(json.loads(line[6:]).get("text", ""))
    return "".join(parts)


def chat(c: httpx.Client, model: str) -> httpx.Response:
    return c.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )


@pytest.fixture()
def server(tmp_path: Path) -> Any:
    srv = start_server(tmp_path, "--model", "", "--max-loaded-models", "-1")
    try:
        yield srv
    finally:
        srv.stop()


def test_idle_downsize_frees_the_kv_and_the_next_request_restores_it(
    server: RunningServer,
) -> None:
    load = {
        "model_name": DEFAULT_MODEL,
        "ctx_size": CTX,
        "auto_evict": True,
        # Long enough for the steps below to read the active size first, on a busy machine.
        "downsize_idle_timeout": 5,
        "evict_idle_timeout": 3600,
    }
    with server.client() as c:
        assert c.post("/api/v1/load", json=load).status_code == 200
        sids = [c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"]]
        sids.append(c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"])
        story = "Once upon a time, in a quiet village by the sea,"
        assert turn(c, sids[0], story) == turn(c, sids[1], story)
        control = turn(c, sids[1], " The end.")  # before any downsize
        c.delete(f"/api/v1/sessions/{sids[1]}")
        active = entry(server, DEFAULT_MODEL)
        assert active is not None and active["status"] in ("ready", "in_use"), active
        rss_active = active["memory"]["rss_bytes"]
        health = server.wait_for(status_is(DEFAULT_MODEL, "downsized"), timeout_s=60)
        downsized = next(m for m in health["all_models_loaded"])  # type: ignore[attr-defined]
        freed = rss_active - downsized["memory"]["rss_bytes"]
        assert freed >= KV_BYTES_PER_TOKEN * CTX, f"freed {freed >> 20} MiB"
        # The session continues exactly as it would have; the model was not reloaded.
        assert turn(c, sids[0], " The end.") == control
        assert entry(server, DEFAULT_MODEL)["num_loads"] == 1  # type: ignore[index]
        assert chat(c, DEFAULT_MODEL).status_code == 200


def test_pressure_evicts_by_weighted_score_spares_pins_and_requests_rescue(
    server: RunningServer,
) -> None:
    with server.client() as c:
        protected = {"auto_evict": True, "evict_weight_factor": 1e6}
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, **protected}).is_success
        assert c.post("/api/v1/load", json={"model_name": GEMMA, "auto_evict": True}).is_success
        # SmolLM2 has been idle longer, but its weight factor protects it.
        got = c.post("/internal/simulate-vram-pressure", json={"pct": 0.99}).json()
        assert got == {"status": "ok", "actions": [{"model_name": GEMMA, "action": "evict"}]}
        assert chat(c, GEMMA).status_code == 200, "a request for the evicted model is served"
        assert c.post(
            "/internal/pin", json={"model_name": DEFAULT_MODEL, "pinned": True}
        ).is_success
        c.post("/api/v1/unload", json={"model_name": GEMMA})
        got = c.post("/internal/simulate-vram-pressure", json={"pct": 0.99}).json()
        assert got["actions"] == [], "pinned models are never evicted by memory management"
        assert entry(server, DEFAULT_MODEL) is not None
        bad = c.post("/internal/simulate-vram-pressure", json={"pct": "lots"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "pct"


def test_settings_take_effect_at_once_and_pins_survive_a_restart(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "--model", "")
    try:
        with srv.client() as c:
            memory = srv.health()["memory"]
            assert memory["auto_evict"] is False and memory["monitoring"] is False  # type: ignore[index]
            r = c.post("/internal/set", json={"auto_evict": True, "auto_evict_threshold_pct": 0.8})
            assert r.status_code == 200, r.text
            memory = srv.health()["memory"]
            assert memory["auto_evict"] is True and memory["monitoring"] is True  # type: ignore[index]
            assert memory["auto_evict_threshold_pct"] == 0.8  # type: ignore[index]
            load = {"model_name": DEFAULT_MODEL, "pinned": True, "ctx_size": 1536}
            assert c.post("/api/v1/load", json=load).status_code == 200
    finally:
        srv.stop()
    again = start_server(tmp_path, "--model", "")
    try:
        health = again.wait_for(status_is(DEFAULT_MODEL, "ready"), timeout_s=120)
        restored = health["all_models_loaded"][0]  # type: ignore[index]
        assert restored["pinned"] is True
        assert restored["recipe_options"]["ctx_size"] == 1536
        assert health["memory"]["auto_evict_threshold_pct"] == 0.8  # type: ignore[index]
        with again.client() as c:
            c.post("/internal/pin", json={"model_name": DEFAULT_MODEL, "pinned": False})
        assert json.loads((tmp_path / "home" / "pins.json").read_text()) == {}
    finally:
        again.stop()


def test_churn_during_downsizing_fails_no_request_and_leaks_no_process(
    server: RunningServer,
) -> None:
    opts = {"auto_evict": True, "downsize_idle_timeout": 0, "evict_idle_timeout": 3600}
    failures: list[str] = []
    pids: set[int] = set()
    stop = threading.Event()

    def requests(model: str) -> None:
        with server.client(timeout=120) as c:
            while not stop.is_set():
                r = chat(c, model)
                if r.status_code != 200:
                    failures.append(f"{model}: {r.status_code} {r.text[:200]}")
                time.sleep(random.uniform(0.0, 0.6))  # idle gaps: downsizes happen

    def control() -> None:
        rng = random.Random(7)
        with server.client(timeout=120) as c:
            while not stop.is_set():
                op = rng.choice(["pressure", "idle", "load", "unload"])
                model = rng.choice([DEFAULT_MODEL, GEMMA])
                if op == "pressure":
                    c.post(
                        "/internal/simulate-vram-pressure", json={"pct": rng.choice([0.95, 0.5])}
                    )
                elif op == "idle":
                    c.post("/internal/simulate-vram-pressure", json={"pct": -1})
                elif op == "load":
                    c.post("/api/v1/load", json={"model_name": model, **opts})
                else:
                    c.post("/api/v1/unload", json={"model_name": model})
                health = c.get("/api/v1/health").json()
                pids.update(m["pid"] for m in health["all_models_loaded"] if m["pid"])
                time.sleep(rng.uniform(0.1, 0.8))

    with server.client() as c:
        for model in (DEFAULT_MODEL, GEMMA):
            assert c.post("/api/v1/load", json={"model_name": model, **opts}).is_success
    threads = [threading.Thread(target=requests, args=(m,)) for m in (DEFAULT_MODEL, GEMMA)]
    threads += [threading.Thread(target=control)]
    for t in threads:
        t.start()
    time.sleep(25)
    stop.set()
    for t in threads:
        t.join(timeout=150)
    assert not any(t.is_alive() for t in threads), "a request hung"
    assert failures == []
    server.stop()
    assert pids and not [pid for pid in pids if alive(pid)], "a backend outlived the router"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_config_set_reaches_a_running_server(server: RunningServer) -> None:
    """Issue 11: `juggler config set auto_evict=true` takes effect without a restart."""
    port = server.base_url.rsplit(":", 1)[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")},
        "JUGGLER_HOME": str(server.home),
        "JUGGLER_PORT": port,
    }
    cmd = [sys.executable, "-m", "juggler", "config", "set", "auto_evict=true"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "applied to the running server" in done.stdout
    assert server.health()["memory"]["auto_evict"] is True  # type: ignore[index]
    stored = json.loads((server.home / "config.json").read_text())
    assert stored["auto_evict"] is True
