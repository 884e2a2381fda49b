"""The security model (issue 10): nothing a client sends runs a command, reads a file
outside the model directories or changes config unless the admin allowed it. These run
the real router app in-process (no model is loaded, so no backend process starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.core.security import LOG_PATHS

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"

ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def client(home: Path, peer: tuple[str, int] = ("testclient", 50000), **values: Any) -> TestClient:
    """The app in-process; the peer "testclient" is not a loopback client."""
    settings = Settings(model="", **values)
    app = create_app(settings, Registry(home=home))
    return TestClient(app, base_url=LOCAL, raise_server_exceptions=False, client=peer)


@pytest.fixture()
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "m.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    return path


COMMAND_PULL = {
    "model_name": "user.evil",
    "recipe": "command",
    "command": "sh -c 'touch /tmp/pwned; sleep 100' {port}",
}


def test_a_client_cannot_register_a_command_without_admin_key_and_config(home: Path) -> None:
    """Issue 10, point 1: "a client can register a model with the `command` recipe through
    `POST /api/v1/pull` and then `POST /api/v1/load` it: Juggler runs the client's command
    line." Refused: without the admin key, and without allow_command_recipes in config."""
    with client(home) as c:
        r = c.post("/api/v1/pull", json=COMMAND_PULL)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert "allow_command_recipes" in r.json()["error"]["message"]
        assert c.post("/api/v1/load", json={"model_name": "user.evil"}).status_code == 404
    with client(home, admin_api_key="admin-secret") as c:
        r = c.post("/api/v1/pull", json=COMMAND_PULL, headers=ADMIN)
        assert r.status_code == 403  # the admin key alone is not enough
    with client(home, admin_api_key="admin-secret", allow_command_recipes=True) as c:
        assert c.post("/api/v1/pull", json=COMMAND_PULL).status_code == 403
        assert c.post("/api/v1/pull", json=COMMAND_PULL, headers=ADMIN).status_code == 200


def test_local_files_outside_the_model_dirs_need_the_admin_key(home: Path, gguf: Path) -> None:
    body = {"model_name": "user.local", "checkpoint": str(gguf)}
    with client(home) as c:
        r = c.post("/api/v1/pull", json=body)
        assert r.status_code == 403 and r.json()["error"]["param"] == "checkpoint"
        traversal = {**body, "checkpoint": str(home / "models" / ".." / ".." / gguf.name)}
        assert c.post("/api/v1/pull", json=traversal).status_code == 403
        packaged = {**body, "checkpoint": "pypi:os/../../etc/passwd.gguf"}
        assert c.post("/api/v1/pull", json=packaged).status_code == 403
        on_the_fly = {"model_name": "user.local", "checkpoint": str(gguf)}
        assert c.post("/api/v1/load", json=on_the_fly).status_code == 403
    with client(home, model_dirs=(str(gguf.parent),)) as c:
        assert c.post("/api/v1/pull", json=body).status_code == 200
    with client(home, admin_api_key="admin-secret") as c:
        other = {**body, "model_name": "user.other"}
        assert c.post("/api/v1/pull", json=other, headers=ADMIN).status_code == 200


def test_internal_routes_need_the_admin_key_or_a_loopback_client(home: Path) -> None:
    with client(home) as c:  # TestClient's peer is "testclient": not loopback
        r = c.post("/internal/set", json={"max_loaded_models": 3})
        assert r.status_code == 403
        assert c.get("/internal/config").status_code == 403
    with client(home, admin_api_key="admin-secret") as c:
        assert c.post("/internal/set", json={"max_loaded_models": 3}).status_code == 401
        ok = c.post("/internal/set", json={"max_loaded_models": 3}, headers=ADMIN)
        assert ok.status_code == 200
        assert "admin_api_key" not in c.get("/internal/config", headers=ADMIN).json()


LOOPBACK = ("127.0.0.1", 50000)


def test_the_logs_need_the_admin_key_or_a_loopback_client(home: Path) -> None:
    """Backend output may hold other users' prompts: `GET /api/v1/logs` is guarded like
    /internal/*, the admin key when one is set, else loopback clients only (and still
    the API key, as every route)."""
    user = {"Authorization": "Bearer user-key"}
    for path in ("/api/v1/logs", "/v1/logs"):
        with client(home, api_key="user-key") as remote:  # peer "testclient"
            r = remote.get(path, headers=user)
            assert r.status_code == 403 and "loopback" in r.json()["error"]["message"]
        with client(home, peer=LOOPBACK, api_key="user-key") as local:
            assert local.get(path).status_code == 401  # the API key, as everywhere
            assert local.get(path, headers=user).status_code == 200
        with client(home, api_key="user-key", admin_api_key="admin-secret") as c:
            r = c.get(path, headers=user)
            assert r.status_code == 401 and "admin" in r.json()["error"]["message"]
            assert c.get(path).status_code == 401
            assert c.get(path, headers=ADMIN).status_code == 200  # from anywhere
            assert c.get("/api/v1/health", headers=user).status_code == 200


def test_every_logs_route_is_guarded(home: Path) -> None:
    """A new mount of the logs route cannot slip past the guard."""
    app = create_app(Settings(model=""), Registry(home=home))
    logs = {p for p in app.openapi()["paths"] if p.rstrip("/").endswith("/logs")}
    assert logs and logs <= LOG_PATHS


def test_api_key_accepts_the_admin_key_and_refuses_others(home: Path) -> None:
    with client(home, api_key="user-key", admin_api_key="admin-secret") as c:
        assert c.get("/api/v1/models").status_code == 401
        bad = {"Authorization": "Bearer user-kez"}
        assert c.get("/api/v1/models", headers=bad).status_code == 401
        assert (
            c.get("/api/v1/models", headers={"Authorization": "Bearer user-key"}).status_code == 200
        )
        assert c.get("/api/v1/models", headers=ADMIN).status_code == 200
        assert c.get("/live").status_code == 200


def test_cors_is_off_by_default_and_configurable(home: Path) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
    }
    with client(home) as c:
        r = c.options("/api/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    with client(home, cors_origins=("https://app.example",)) as c:
        r = c.options("/api/v1/chat/completions", headers=preflight)
        assert r.headers["access-control-allow-origin"] == "https://app.example"


def test_every_error_is_json_with_the_request_id(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10: "no plain-text error ever (one exception handler turns everything into
    the OpenAI/Lemonade JSON error shape, with the request id)"."""
    with client(home) as c:
        r = c.post(
            "/api/v1/load",
            json={"model_name": "SmolLM2-135M-Instruct-GGUF", "llamacpp_args": '--workers "2'},
            headers={"X-Request-ID": "abc-123"},
        )
        assert r.status_code == 400 and r.headers["x-request-id"] == "abc-123"
        err = r.json()["error"]
        assert err["param"] == "llamacpp_args" and err["request_id"] == "abc-123"
        assert c.get("/nope").json()["error"]["code"] == "not_found"
        surrogate = c.post(
            "/api/v1/chat/completions",
            content=b'{"model": "SmolLM2-135M-Instruct-GGUF", "messages": '
            b'[{"role": "user", "content": "a\\ud800"}]}',
            headers={"content-type": "application/json"},
        )
        assert surrogate.status_code == 400 and "surrogate" in surrogate.json()["error"]["message"]
        assert c.put("/api/v1/models").status_code == 405
        monkeypatch.setattr(Registry, "list", lambda self: 1 / 0)
        boom = c.get("/api/v1/models")
        assert boom.status_code == 500
        assert boom.json()["error"]["request_id"] == boom.headers["x-request-id"]


def test_openapi_declares_every_post_body(home: Path) -> None:
    """Issue 10, point 8: "The OpenAPI document declares no request bodies"."""
    with client(home) as c:
        doc = c.get("/openapi.json").json()
    missing = [
        path
        for path, ops in doc["paths"].items()
        if "post" in ops and "requestBody" not in ops["post"] and not path.endswith("/cancel")
    ]
    assert missing == []
    assert "ChatRequest" in doc["components"]["schemas"]
