"""Issue 49, part 3: "Every `.gguf` under the configured model folders is listed by
`/v1/models`, `/api/v1/models`, `/api/tags` and the dashboard, and loads on first use,
without a pull: named after its file (Ollama-style `name:tag` too), split files
(`-00001-of-00003.gguf`) as one model, `mmproj` files recognised and not listed as
models, its type (llm or embedding) from the GGUF header. New files appear without a
restart." Fast: GGUF headers written by the `gguf` package, a fake clock, the router app
in-process with nothing loaded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import FOLDER_SCAN_TTL_S, Registry
from juggler.registry.folders import MAX_DEPTH, group, ollama_name, scan
from juggler.router.app import create_app


def header(path: Path, arch: str = "llama", *, pooling: int | None = None, ctx: int = 2048) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(ctx)
    if pooling is not None:
        w.add_uint32(f"{arch}.pooling_type", pooling)
    w.add_tensor("a.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_names_follow_the_file_with_an_ollama_name_from_its_quantization() -> None:
    assert ollama_name("Qwen3-8B-Q4_K_M") == "Qwen3-8B:Q4_K_M"
    assert ollama_name("SmolLM2-135M-Instruct.Q4_1") == "SmolLM2-135M-Instruct:Q4_1"
    assert ollama_name("gemma-3-270m-q4_k_m") == "gemma-3-270m:q4_k_m"
    assert ollama_name("phi-4-IQ4_XS") == "phi-4:IQ4_XS"
    assert ollama_name("model-bf16") == "model:bf16"
    assert ollama_name("tiny-llama") == "tiny-llama:latest"


def test_split_parts_are_one_model_and_projectors_none() -> None:
    d = Path("/m")
    files = [
        d / "big-Q4_K_M-00001-of-00003.gguf",
        d / "big-Q4_K_M-00002-of-00003.gguf",
        d / "big-Q4_K_M-00003-of-00003.gguf",
        d / "half-00001-of-00002.gguf",  # its second part is missing: not listed
        d / "mmproj-model-f16.gguf",
        d / "vision" / "llava-mmproj.gguf",
        d / "a.gguf",
    ]
    found = {c.name: c for c in group(files)}
    assert set(found) == {"extra.a", "extra.big-Q4_K_M"}
    big = found["extra.big-Q4_K_M"]
    assert big.files[0].name == "big-Q4_K_M-00001-of-00003.gguf" and len(big.files) == 3
    assert big.ollama_name == "big:Q4_K_M"


def test_the_same_file_name_twice_is_named_after_its_folder_too() -> None:
    found = group([Path("/x/Llama/model-Q8_0.gguf"), Path("/x/Mistral/model-Q8_0.gguf")])
    assert [c.name for c in found] == ["extra.model-Q8_0", "extra.Mistral-model-Q8_0"]
    odd = group([Path("/x/my model (v2).gguf")])
    assert odd[0].name == "extra.my-model-v2" and odd[0].ollama_name == "my-model-v2:latest"


def test_a_scan_reads_the_type_from_the_header(tmp_path: Path) -> None:
    header(tmp_path / "chat-Q4_0.gguf", ctx=8192)
    header(tmp_path / "emb" / "mini-f16.gguf", "bert")
    header(tmp_path / "rank.gguf", "qwen3", pooling=4)
    (tmp_path / "notes.gguf").write_text("not a model")
    models = {m.name: m for m in scan([tmp_path])}
    assert set(models) == {"extra.chat-Q4_0", "extra.mini-f16", "extra.rank"}
    assert models["extra.chat-Q4_0"].labels == ("custom",)
    assert models["extra.chat-Q4_0"].max_context_window == 8192
    assert models["extra.mini-f16"].labels == ("embeddings", "custom")
    assert models["extra.rank"].type.value == "reranking"
    chat = models["extra.chat-Q4_0"]
    assert chat.checkpoint == str(tmp_path / "chat-Q4_0.gguf")
    assert chat.extra["ollama_name"] == "chat:Q4_0"


def test_only_the_configured_folders_are_scanned(tmp_path: Path) -> None:
    """Security: "A folder scan must only look in the configured model folders": a link
    that leads outside them is not followed, and depth is bounded."""
    inside, outside = tmp_path / "models", tmp_path / "private"
    header(outside / "secret.gguf")
    inside.mkdir()
    os.symlink(outside / "secret.gguf", inside / "link.gguf")
    os.symlink(outside, inside / "linked-dir")
    deep = inside
    for i in range(MAX_DEPTH + 2):
        deep = deep / f"d{i}"
    header(deep / "too-deep.gguf")
    header(inside / "d0" / "ok.gguf")
    assert [m.name for m in scan([inside])] == ["extra.ok"]
    assert scan([tmp_path / "missing"]) == []


def test_new_files_appear_after_the_scan_ttl(tmp_path: Path) -> None:
    now = [0.0]
    reg = Registry(tmp_path / "home", model_dirs=(str(tmp_path / "m"),), clock=lambda: now[0])
    header(tmp_path / "m" / "one.gguf")
    assert [m.name for m in reg.found()] == ["extra.one"]
    header(tmp_path / "m" / "two-Q8_0.gguf")
    assert [m.name for m in reg.found()] == ["extra.one"]  # the last scan is still fresh
    now[0] += FOLDER_SCAN_TTL_S
    assert [m.name for m in reg.found()] == ["extra.one", "extra.two-Q8_0"]
    # Every name finds it: its own, its Ollama name (any case, `:latest` dropped), its file.
    for name in ("extra.two-Q8_0", "two:Q8_0", "two-Q8_0"):
        assert reg.get(name).name == "extra.two-Q8_0"
    assert reg.lookup("ONE").name == "extra.one" and reg.lookup("one:latest").name == "extra.one"
    assert reg.lookup("TWO:q8_0").name == "extra.two-Q8_0"
    assert reg.find("SmolLM2-135M-Instruct-GGUF") is not None  # built-ins stay first


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    header(tmp_path / "m" / "tiny-chat-Q4_0.gguf", ctx=4096)
    header(tmp_path / "m" / "mmproj-tiny-f16.gguf", "clip")
    header(tmp_path / "m" / "embed" / "bge-f16.gguf", "bert")
    settings = Settings(model="", model_dirs=(str(tmp_path / "m"),), admin_api_key="adm")
    app = create_app(settings, Registry(tmp_path / "home"))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        yield c


def test_the_apis_list_the_found_models(client: TestClient) -> None:
    def listed(path: str) -> dict[str, dict[str, Any]]:
        return {m["id"]: m for m in client.get(path).json()["data"]}

    for path in ("/v1/models", "/api/v1/models"):
        models = listed(path)
        assert {"extra.tiny-chat-Q4_0", "extra.bge-f16"} <= set(models)
        assert not any("mmproj" in name for name in models)
        chat = models["extra.tiny-chat-Q4_0"]
        assert chat["downloaded"] is True and chat["type"] == "llm"
        assert chat["recipe"] == "llamacpp" and "custom" in chat["labels"]
        assert chat["max_context_window"] == 4096 and chat["context_length"] > 0
        assert models["extra.bge-f16"]["type"] == "embedding"
    tags = {m["name"] for m in client.get("/api/tags").json()["models"]}
    assert {"tiny-chat:Q4_0", "bge:f16"} <= tags
    shown = client.post("/api/show", json={"model": "tiny-chat:Q4_0"})
    assert shown.status_code == 200, shown.text


def test_a_found_model_is_not_deleted_through_the_api(client: TestClient) -> None:
    """Lemonade: "Models discovered from `--extra-models-dir` cannot be deleted via the
    API. They are user-managed external files"; the file stays."""
    r = client.post("/api/v1/delete", json={"model_name": "extra.tiny-chat-Q4_0"})
    assert r.status_code == 400 and "tiny-chat-Q4_0.gguf" in r.json()["error"]["message"]
    r = client.request("DELETE", "/api/delete", json={"model": "tiny-chat:Q4_0"})
    assert r.status_code == 400
    assert "extra.tiny-chat-Q4_0" in {m["id"] for m in client.get("/v1/models").json()["data"]}


def test_model_dirs_set_at_run_time_are_scanned(client: TestClient, tmp_path: Path) -> None:
    header(tmp_path / "other" / "late-Q8_0.gguf")
    r = client.post(
        "/internal/set",
        json={"model_dirs": [str(tmp_path / "other")]},
        headers={"Authorization": "Bearer adm"},
    )
    assert r.status_code == 200, r.text
    names = {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert "extra.late-Q8_0" in names and "extra.tiny-chat-Q4_0" not in names
