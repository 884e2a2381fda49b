"""Issue 24: gaps Lemonade's own test suites (commit e385039ed335) found, on a real router
with real backends: a `null` load option skips the saved one for that load only, and
Lemonade's load options inside Ollama's `options` stay out of the model's options."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("suite"), "--model", "", "--ctx-size", "1024")
    try:
        yield srv
    finally:
        srv.stop()


def loaded(server: RunningServer, name: str) -> dict[str, Any]:
    entries: list[dict[str, Any]] = server.health()["all_models_loaded"]  # type: ignore[assignment]
    return next(m for m in entries if m["model_name"] == name)


def test_null_load_option_skips_the_saved_one_for_one_load(server: RunningServer) -> None:
    """lemonade.md, /load: "Passing explicit `null` ignores only that saved key for this
    load and falls through to the lower default layers without changing
    `recipe_options.json`" (Lemonade's suite: "A tombstone masks only its key; unrelated
    saved settings still apply")."""
    options = f"/api/v1/models/{DEFAULT_MODEL}/options"
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        saved = {"llamacpp_args": "--threads 1", "ctx_size": 768}
        assert c.post(options, json=saved).status_code == 200
        r = c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "llamacpp_args": None})
        assert r.status_code == 200, r.text
        shown = loaded(server, DEFAULT_MODEL)["recipe_options"]
        assert shown["llamacpp_args"] == "" and shown["ctx_size"] == 768
        assert c.get(options).json()["saved"] == saved
        # The next load without the null uses the saved args again (a reload).
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        assert loaded(server, DEFAULT_MODEL)["recipe_options"]["llamacpp_args"] == "--threads 1"
        c.delete(options)


def test_lemonade_load_options_in_ollama_options_stay_out(server: RunningServer) -> None:
    """Lemonade's suite: "Ollama auto-load must forward only ctx_size to recipe_options.
    Request-scoped fields (temperature, top_p, num_predict, etc.) must not leak into
    persistent model-load settings"."""
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        body = {
            "model": DEFAULT_MODEL,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": False,
            "options": {
                "num_ctx": 896,
                "num_predict": 4,
                "temperature": 0.7,
                "pinned": True,
                "llamacpp_args": "--foo-bar",
                "auto_evict": True,
                "evict_idle_timeout": 1,
            },
        }
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
        entry = loaded(server, DEFAULT_MODEL)
        shown = entry["recipe_options"]
        assert shown["ctx_size"] == 896 and entry["pinned"] is False
        assert not {"pinned", "auto_evict", "evict_idle_timeout", "temperature"} & set(shown)
        assert "--foo-bar" not in shown["llamacpp_args"]


def test_automatic_context_length_is_the_size_the_load_gets(server: RunningServer) -> None:
    """Issue 49, Lemonade's test 006c: "with `ctx_size` automatic (-1), a model's
    `context_length` in `/models` is the resolved size ..., never absent or a sentinel";
    the size shown before the load is the size the load gets."""
    options = f"/api/v1/models/{DEFAULT_MODEL}/options"
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        assert c.post(options, json={"ctx_size": -1}).status_code == 200
        try:
            before = c.get(f"/api/v1/models/{DEFAULT_MODEL}").json()["context_length"]
            assert before > 0
            r = c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL})
            assert r.status_code == 200, r.text
            assert loaded(server, DEFAULT_MODEL)["recipe_options"]["ctx_size"] == before
            listed = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
            assert listed[DEFAULT_MODEL]["context_length"] == before
        finally:
            c.delete(options)
            c.post("/api/v1/unload", json={})
