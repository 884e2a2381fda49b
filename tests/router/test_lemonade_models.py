"""Lemonade's model routes over HTTP (issue 13), on the real router app in-process with
nothing loaded, against a stand-in Hugging Face hub: pull (JSON and server-sent events,
read by a client that parses `event:` lines), the catalog, delete, runtime config."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from tests.registry.hub import StandInHub, running_hub

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"

GGUF = b"GGUF" + bytes(range(256)) * 64  # 16 KiB, checked by SHA-256
QWEN = "Qwen3-0.6B-GGUF"  # a catalog name: unsloth/Qwen3-0.6B-GGUF:Q4_0
ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    repos = {
        "unsloth/Qwen3-0.6B-GGUF": {"Qwen3-0.6B-Q4_0.gguf": GGUF, "Qwen3-0.6B-Q8_0.gguf": GGUF},
        "acme/tiny-GGUF": {"tiny-Q8_0.gguf": GGUF},
    }
    with running_hub(repos) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


@pytest.fixture()
def client(hub: StandInHub, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(Settings(model="", admin_api_key="admin-secret"), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def sse_events(lines: Iterator[str]) -> list[tuple[str, dict[str, Any]]]:
    """A Lemonade client's reading of the stream: `event:` then `data:` lines."""
    out: list[tuple[str, dict[str, Any]]] = []
    name = "message"
    for line in lines:
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            out.append((name, json.loads(line.removeprefix("data:"))))
            name = "message"
    return out


def pull_stream(client: TestClient, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with client.stream("POST", "/api/v1/pull", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r.iter_lines())


def test_pulling_a_catalog_name_streams_progress_then_complete(client: TestClient) -> None:
    """Lemonade: "`stream=true` ... `event: progress` (file, file_index, total_files,
    bytes_downloaded, bytes_total, percent) ... `complete` when all files are downloaded"."""
    assert client.get(f"/api/v1/models/{QWEN}").json()["downloaded"] is False
    events = pull_stream(client, {"model_name": QWEN})
    kinds = [k for k, _ in events]
    assert kinds[-1] == "complete" and set(kinds[:-1]) == {"progress"}, kinds
    last = events[-2][1]
    assert last == {
        "file": "Qwen3-0.6B-Q4_0.gguf",
        "file_index": 1,
        "total_files": 1,
        "bytes_downloaded": len(GGUF),
        "bytes_total": len(GGUF),
        "percent": 100,
    }
    assert events[-1][1] == {"file_index": 1, "total_files": 1, "percent": 100}
    entry = client.get(f"/api/v1/models/{QWEN}").json()
    assert entry["downloaded"] is True and entry["size"] == round(len(GGUF) / 1e9, 3)


def test_a_failed_pull_streams_an_error_event(client: TestClient, hub: StandInHub) -> None:
    hub.corrupt["Qwen3-0.6B-Q4_0.gguf"] = GGUF[:-1] + b"!"
    events = pull_stream(client, {"model_name": QWEN})
    assert events[-1][0] == "error" and "corrupt" in events[-1][1]["error"]
    assert client.get(f"/api/v1/models/{QWEN}").json()["downloaded"] is False


def test_pull_without_stream_answers_one_json_object(client: TestClient) -> None:
    r = client.post("/api/v1/pull", json={"model_name": QWEN})
    assert r.status_code == 200
    assert r.json() == {"status": "success", "message": f"Installed model: {QWEN}"}
    packaged = client.post("/api/v1/pull", json={"model_name": "SmolLM2-135M-Instruct-GGUF"})
    assert packaged.status_code == 200  # already installed: nothing to fetch


def test_registering_a_user_model_downloads_then_registers_it(client: TestClient) -> None:
    body = {"model_name": "user.tiny", "checkpoint": "acme/tiny-GGUF:Q8_0", "recipe": "llamacpp"}
    events = pull_stream(client, {**body, "embedding": True})
    assert events[-1][0] == "complete"
    entry = client.get("/api/v1/models/user.tiny").json()
    assert entry["downloaded"] and entry["labels"] == ["embeddings"]
    assert entry["type"] == "embedding"
    # the same through Lemonade CLI's {"checkpoints": {"main": ...}}
    r = client.post(
        "/api/v1/pull",
        json={"model_name": "user.tiny2", "checkpoints": {"main": "acme/tiny-GGUF:Q8_0"}},
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model_name": "extra.thing"}, 400, "model_name"),
        ({"model_name": "extra.thing", "checkpoint": "acme/tiny-GGUF"}, 400, "model_name"),
        ({"model_name": "my-model", "checkpoint": "acme/tiny-GGUF"}, 400, "model_name"),
        ({"model_name": "no-such-model"}, 404, "model"),
        ({"model_name": "user.v", "checkpoint": "a/b", "mmproj": "x/m.gguf"}, 400, "mmproj"),
        ({"model_name": "user.v", "checkpoints": {"vae": "a/b"}}, 400, "checkpoints"),
    ],
)
def test_pull_refuses_reserved_and_unknown_names(
    client: TestClient, body: dict[str, Any], status: int, param: str
) -> None:
    r = client.post("/api/v1/pull", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"].startswith(param)


def test_a_failed_registration_leaves_nothing_registered(client: TestClient) -> None:
    r = client.post("/api/v1/pull", json={"model_name": "user.x", "checkpoint": "acme/nope:Q8"})
    assert r.status_code == 404
    assert client.get("/api/v1/models/user.x").status_code == 404


def test_models_list_shows_downloaded_models_unless_show_all(client: TestClient) -> None:
    """Lemonade: "By default, only models available locally (downloaded) are shown"."""
    ids = {m["id"] for m in client.get("/api/v1/models").json()["data"]}
    assert {"SmolLM2-135M-Instruct-GGUF", "Gemma-3-270M-GGUF"} <= ids and QWEN not in ids
    every = client.get("/api/v1/models?show_all=true").json()["data"]
    qwen = next(m for m in every if m["id"] == QWEN)
    assert qwen["checkpoint"] == "unsloth/Qwen3-0.6B-GGUF:Q4_0" and qwen["downloaded"] is False
    assert qwen["size"] == 0.38 and qwen["labels"] == ["reasoning"] and qwen["suggested"]
    smol = next(m for m in every if m["id"] == "SmolLM2-135M-Instruct-GGUF")
    assert smol["downloaded"] is True and smol["max_context_window"] == 8192


def test_delete_removes_downloads_and_registrations_with_lemonade_codes(
    client: TestClient, tmp_path: Path
) -> None:
    client.post("/api/v1/pull", json={"model_name": QWEN})
    r = client.post("/api/v1/delete", json={"model_name": QWEN})
    assert r.status_code == 200 and r.json()["message"] == f"Deleted model: {QWEN}"
    assert client.get(f"/api/v1/models/{QWEN}").json()["downloaded"] is False
    assert not list((tmp_path / "home" / "models").rglob("*.gguf"))
    assert client.post("/api/v1/delete", json={"model_name": QWEN}).status_code == 404
    assert client.post("/api/v1/delete", json={"model_name": "nope"}).status_code == 422
    packaged = client.post("/api/v1/delete", json={"model_name": "SmolLM2-135M-Instruct-GGUF"})
    assert packaged.status_code == 400
    client.post("/api/v1/pull", json={"model_name": "user.t", "checkpoint": "acme/tiny-GGUF:Q8_0"})
    assert client.post("/api/v1/delete", json={"model_name": "user.t"}).status_code == 200
    assert client.get("/api/v1/models/user.t").status_code == 404


def test_runtime_config_set_is_validated_persisted_and_shown(
    client: TestClient, tmp_path: Path
) -> None:
    """Lemonade's `config set key=value`: applied to the running server and kept."""
    r = client.post(
        "/internal/set",
        json={"max_loaded_models": 3, "llamacpp.args": "--workers 2"},
        headers=ADMIN,
    )
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == {
        "max_loaded_models": [3, 3, 3, 3, 3],
        "llamacpp_args": "--workers 2",
    }
    assert r.json()["restart_required"] == []
    config = client.get("/internal/config", headers=ADMIN).json()
    assert config["max_models"]["llm"] == 3 and config["llamacpp_args"] == "--workers 2"
    stored = json.loads((tmp_path / "home" / "config.json").read_text())
    assert stored["max_loaded_models"] == [3, 3, 3, 3, 3]
    assert stored["llamacpp_args"] == "--workers 2"
    r = client.post("/internal/set", json={"port": 9999}, headers=ADMIN)
    assert r.json()["restart_required"] == ["port"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"ctx_size": 1}, 400),
        ({"nope": 1}, 400),
        ({"llamacpp_args": "--bogus 1"}, 400),
        ({}, 400),
        ({"allow_command_recipes": True}, 403),
        ({"api_key": "x"}, 403),
    ],
)
def test_runtime_config_refuses_bad_and_file_only_keys(
    client: TestClient, body: dict[str, Any], status: int
) -> None:
    r = client.post("/internal/set", json=body, headers=ADMIN)
    assert r.status_code == status, r.text
    assert client.get("/internal/config", headers=ADMIN).json()["ctx_size"] == 4096


def test_system_info_and_routes_of_other_model_kinds(client: TestClient) -> None:
    info = client.get("/api/v1/system-info").json()
    assert info["devices"]["cpu"]["available"] is True
    cpu = info["recipes"]["llamacpp"]["backends"]["cpu"]
    assert cpu["state"] == "installed" and cpu["devices"] == ["cpu"]
    r = client.post("/api/v1/audio/transcriptions", json={"model": "x"})
    assert r.status_code == 404 and "not supported" in r.json()["error"]["message"]
    r = client.post("/api/v1/load", json={"model_name": QWEN, "steps": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "steps"
