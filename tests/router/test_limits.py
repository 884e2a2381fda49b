"""Issue 27's caps, in-process: every request is bounded before it reaches an engine."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.api.limits import MAX_INPUTS, MAX_MESSAGES, limit_value
from juggler.config import Settings
from juggler.errors import BadRequest
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.core.tables import SessionEntry
from juggler.router.ollama.options import MAX_KEEP_ALIVE_S, parse_keep_alive
from tests.conftest import DEFAULT_MODEL

LOCAL = "http://127.0.0.1"


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(model="", max_sessions=2), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_input_lists_are_capped_before_any_model_is_touched(client: TestClient) -> None:
    """Issue 27: "input lists of embeddings/completions capped (OpenAI caps embeddings at
    2,048 inputs ...)"; the model named does not even exist: the cap answers first."""
    many = ["x"] * (MAX_INPUTS + 1)
    cases = [
        ("/v1/embeddings", {"model": "nope", "input": many}, "input"),
        ("/v1/completions", {"model": "nope", "prompt": many}, "prompt"),
        ("/api/embed", {"model": "nope", "input": many}, "input"),
        ("/v1/rerank", {"model": "nope", "query": "q", "documents": many}, "documents"),
    ]
    for path, body, field in cases:
        r = client.post(path, json=body)
        assert r.status_code == 400, (path, r.text)
        assert field in r.text and str(MAX_INPUTS) in r.text, (path, r.text)
    messages = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    for path in ("/v1/chat/completions", "/api/chat"):
        r = client.post(path, json={"model": "nope", "messages": messages})
        assert r.status_code == 400 and "messages" in r.text, (path, r.text)
    # A long single prompt is not a list: not capped by the count.
    r = client.post("/v1/completions", json={"model": "nope", "prompt": "x" * (MAX_INPUTS + 10)})
    assert r.status_code == 404


def test_non_finite_numbers_are_400_in_every_dialect(client: TestClient) -> None:
    """Issue 27: "non-finite floats are 400 in every dialect"."""
    headers = {"Content-Type": "application/json"}
    bodies = [
        ("/v1/chat/completions", b'{"model": "m", "messages": [], "repeat_penalty": Infinity}'),
        ("/api/chat", b'{"model": "m", "options": {"temperature": 1e309}}'),
        ("/api/v1/load", b'{"model_name": "m", "ctx_size": NaN}'),
        ("/v1/responses", b'{"model": "m", "input": "x", "temperature": -Infinity}'),
    ]
    for path, raw in bodies:
        r = client.post(path, content=raw, headers=headers)
        assert r.status_code == 400, (path, r.text)


def test_sessions_are_capped(client: TestClient) -> None:
    """Issue 27: "sessions ... have documented limits" (`max_sessions`: 429 beyond)."""
    state = client.app.state.juggler  # type: ignore[attr-defined]
    state.sessions.prune = lambda live: None  # keep the stand-in entries below
    state.sessions.add("a", SessionEntry("m", 1))
    state.sessions.add("b", SessionEntry("m", 1))
    r = client.post("/api/v1/sessions", json={"model": "whatever"})
    assert r.status_code == 429 and "max_sessions" in r.text


def test_keep_alive_is_bounded() -> None:
    """Issue 27: "keep_alive of 10^22 hours" is no timer: more than a year keeps the model
    loaded, as a negative value does; a non-finite value is a 400."""
    assert parse_keep_alive("5m") == 300
    assert parse_keep_alive(MAX_KEEP_ALIVE_S) == MAX_KEEP_ALIVE_S
    assert parse_keep_alive(1e22 * 3600) == -1
    assert parse_keep_alive("9000000h") == -1
    for bad in (math.inf, "1e999", "nan"):
        with pytest.raises(BadRequest):
            parse_keep_alive(bad)


def test_405_names_the_allowed_methods_and_metrics_is_documented_as_text(
    client: TestClient,
) -> None:
    """Issue 27: "405 carries Allow, /metrics is text" in the OpenAPI document."""
    r = client.delete("/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"
    r = client.post("/v1/responses/resp_x")  # two routes share the path: both listed
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET"
    doc = client.get("/openapi.json").json()
    content = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(content) == ["text/plain"]


def test_the_document_states_what_handlers_require_and_every_error_status(
    client: TestClient,
) -> None:
    """Issue 27: "every status an operation returns is documented, required fields are
    required". The client fixture's server has no default model: `model` is required."""
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    chat = schemas["ChatRequest"]
    assert "model" in chat["required"] and chat["properties"]["model"]["minLength"] == 1
    assert {"required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}} in (
        schemas["NameBody"]["anyOf"]
    )
    chat_op = doc["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "401", "403", "404", "413", "415", "429", "500", "503"} <= set(chat_op)
    health = doc["paths"]["/api/v1/health"]["get"]["responses"]
    assert {"400", "401", "403", "503"} <= set(health) and "413" not in health
    assert "HTTPValidationError" not in schemas  # FastAPI's 422 is never answered


def test_with_a_default_model_the_model_field_may_be_left_out(tmp_path: Path) -> None:
    app = create_app(Settings(model=DEFAULT_MODEL), Registry(tmp_path / "home"))
    chat = app.openapi()["components"]["schemas"]["ChatRequest"]
    assert "model" not in chat.get("required", [])


def test_a_load_past_the_trained_context_is_refused_before_a_process_starts(
    client: TestClient,
) -> None:
    """Issue 27: "a load with `ctx_size: 131072` gave no answer in 150 s and no backend";
    "a load that cannot fit is refused before a process starts"."""
    r = client.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 131072})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "ctx_size"
    assert "8192" in r.json()["error"]["message"]  # SmolLM2's trained context
    assert client.get("/api/v1/health").json()["all_models_loaded"] == []


def test_the_input_caps_are_settings(tmp_path: Path) -> None:
    """Issue 27: "input lists of embeddings/completions capped (OpenAI caps embeddings at
    2,048 inputs; configurable, documented)"."""
    settings = Settings(model="", max_inputs=3, max_messages=2)
    app = create_app(settings, Registry(tmp_path / "home"))
    msgs = [{"role": "user", "content": "hi"}] * 3
    try:
        with TestClient(app, base_url=LOCAL) as c:
            r = c.post("/v1/embeddings", json={"model": "nope", "input": ["a"] * 4})
            assert r.status_code == 400 and "at most 3 inputs" in r.text
            r = c.post("/v1/chat/completions", json={"model": "nope", "messages": msgs})
            assert r.status_code == 400 and "at most 2 messages" in r.text
            r = c.post("/v1/embeddings", json={"model": "nope", "input": ["a"] * 3})
            assert r.status_code == 404  # within the cap: the model is looked up
    finally:
        create_app(Settings(model=""), Registry(tmp_path / "home"))  # the defaults again
    assert limit_value(MAX_INPUTS) == 2048 and limit_value(MAX_MESSAGES) == 8192
