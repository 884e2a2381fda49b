"""Lemonade's pull with a vision projector (issue 51): "a checkpoint that names both as
Lemonade's and llama-server's --mmproj do" is downloaded with its projector and listed
with the `vision` label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import HfRef, hf_cache_dir
from juggler.router.app import create_app
from tests.registry.hub import StandInHub, running_hub

LOCAL = "http://127.0.0.1"
GGUF = b"GGUF" + bytes(range(256)) * 64
PROJ = b"GGUF" + bytes(range(255, -1, -1)) * 32
REPO = "acme/vision-GGUF"


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    repos = {REPO: {"vision-Q8_0.gguf": GGUF, "mmproj-vision-f16.gguf": PROJ}}
    with running_hub(repos) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


@pytest.fixture()
def client(hub: StandInHub, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(model="", admin_api_key="admin-secret"), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    "body",
    [
        {"checkpoint": f"{REPO}:Q8_0", "mmproj": "mmproj-vision-f16.gguf"},
        {"checkpoints": {"main": f"{REPO}:Q8_0", "mmproj": f"{REPO}:mmproj-vision-f16.gguf"}},
    ],
)
def test_pull_with_mmproj_downloads_both_and_lists_vision(
    client: TestClient, body: dict[str, object]
) -> None:
    """lemonade.md: `mmproj` "Multimodal Projector (mmproj) file to use for vision
    models", in either of its pull forms."""
    r = client.post("/api/v1/pull", json={"model_name": "user.eyes", **body})
    assert r.status_code == 200, r.text
    folder = hf_cache_dir(HfRef("acme", "vision-GGUF", None))
    assert (folder / "mmproj-vision-f16.gguf").read_bytes() == PROJ
    assert (folder / "vision-Q8_0.gguf").read_bytes() == GGUF
    entry = client.get("/api/v1/models/user.eyes").json()
    assert "vision" in entry["labels"]


def test_a_projector_missing_from_the_repository_is_refused(client: TestClient) -> None:
    r = client.post(
        "/api/v1/pull",
        json={"model_name": "user.eyes", "checkpoint": f"{REPO}:Q8_0", "mmproj": "nope.gguf"},
    )
    assert r.status_code == 404, r.text
    assert client.get("/api/v1/models/user.eyes").status_code == 404


def test_a_checkpoints_mmproj_of_another_repository_is_a_400(client: TestClient) -> None:
    r = client.post(
        "/api/v1/pull",
        json={
            "model_name": "user.eyes",
            "checkpoints": {"main": f"{REPO}:Q8_0", "mmproj": "other/repo:mmproj.gguf"},
        },
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "checkpoints.mmproj"


def test_a_model_without_a_projector_has_no_vision_label(client: TestClient) -> None:
    r = client.post("/api/v1/pull", json={"model_name": "user.plain", "checkpoint": f"{REPO}:Q8_0"})
    assert r.status_code == 200, r.text
    # the repository's folder holds the projector of an earlier pull? not here: only the GGUF
    folder = hf_cache_dir(HfRef("acme", "vision-GGUF", None))
    assert not (folder / "mmproj-vision-f16.gguf").exists()
    assert "vision" not in client.get("/api/v1/models/user.plain").json()["labels"]
