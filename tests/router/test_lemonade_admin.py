"""Issue 24, item 6: Lemonade's management contract (reference/lemonade/lemonade.md) on
the real router app in-process, nothing loaded: `/internal/pin`'s validation, the
per-model options API, `models/register`, `/internal/aliases`, the naming rules and
delete's codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.router.app import create_app

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"
SMOL = "SmolLM2-135M-Instruct-GGUF"
ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    settings = Settings(model="", ctx_size=2048, admin_api_key="admin-secret")
    app = create_app(settings, Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, headers=ADMIN, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{invalid json", "Invalid JSON body"),
        ('{"pinned": true}', "Parameter 'model' or 'model_name' is required"),
        (f'{{"model": "{SMOL}"}}', "Parameter 'pinned' is required and must be a boolean"),
        (f'{{"model": "{SMOL}", "pinned": "true"}}', "Parameter 'pinned' is required and must"),
    ],
)
def test_pin_refuses_bad_bodies_in_lemonade_words(
    client: TestClient, body: str, message: str
) -> None:
    """Issue 24: "`/pin` with an unparseable body says "Invalid JSON body""; Lemonade's
    suite: "The /pin endpoint rejects invalid requests with HTTP 400 and structured JSON
    errors"."""
    r = client.post("/internal/pin", content=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"


def test_pin_takes_model_as_model_name(client: TestClient) -> None:
    r = client.post("/internal/pin", json={"model": SMOL, "pinned": True})
    assert r.status_code == 404 and r.json()["error"]["message"] == f"Model not loaded: {SMOL}"
