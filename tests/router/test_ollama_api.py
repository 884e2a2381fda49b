"""Ollama's dialect without a model: the pure translations (keep_alive, options, names)
and the routes that need no backend, on the real router app in-process."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.errors import BadRequest, InsufficientStorage, NotImplementedParam, PayloadTooLarge
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.ollama import options as oo
from juggler.router.ollama import request as rq
from juggler.router.ollama import uploads
from juggler.router.ollama import wire as ol

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (300, 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("-1", -1.0),
        (-1, -1.0),
        ("250ms", 0.25),
        ("10s", 10.0),
        ("2.5", 2.5),
    ],
)
def test_keep_alive_reads_numbers_and_go_durations(value: Any, seconds: float) -> None:
    assert oo.parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["5 minutes", "m5", "", "1h-2m"])
def test_a_bad_keep_alive_is_a_400(value: str) -> None:
    with pytest.raises(BadRequest, match="keep_alive"):
        oo.parse_keep_alive(value)


def test_keep_alive_maps_onto_idle_eviction() -> None:
    """Issue 13: "keep_alive maps onto residency (0 = unload when idle, a duration =
    idle timeout, -1 = keep)"."""
    assert oo.keep_alive_options(0) == {
        "auto_evict": True,
        "evict_idle_timeout": 0.0,
        "downsize_idle_timeout": 0.0,
    }
    assert oo.keep_alive_options(600)["evict_idle_timeout"] == 600
    # The idle timeouts are whole seconds (Lemonade's): a fraction rounds up, never to 0.
    assert oo.keep_alive_options(1.5)["evict_idle_timeout"] == 2
    assert oo.keep_alive_options(0.2)["downsize_idle_timeout"] == 1
    keep = oo.keep_alive_options(-1)
    assert keep["auto_evict"] is False and keep["evict_idle_timeout"] >= 10 * 365 * 86400


def test_options_split_into_sampling_and_load_options() -> None:
    sampling, load = oo.split_options(
        {
            "temperature": 0.2,
            "num_predict": 64,
            "stop": ["\n"],
            "seed": 7,
            "num_ctx": 1024,
            "num_thread": 2,
            "num_batch": 128,
            "num_gpu": 0,
            "mirostat": 0,
            "use_mmap": True,
            "top_k": None,
        }
    )
    assert sampling == {"temperature": 0.2, "max_tokens": 64, "stop": ["\n"], "seed": 7}
    assert load == {
        "ctx_size": 1024,
        "n_gpu_layers": 0,  # issue 48: Ollama's num_gpu is the layers offloaded
        "llamacpp_args": "--threads 2 --batch-size 128",
    }
    assert oo.split_options({"num_gpu": 12})[1] == {"n_gpu_layers": 12}
    for bad in ("all", True, -2, 1.5):
        with pytest.raises(BadRequest) as err:
            oo.split_options({"num_gpu": bad})
        assert err.value.param == "options.num_gpu"
    assert oo.split_options({"num_predict": -1}) == ({}, {})


@pytest.mark.parametrize(
    "options",
    [
        {"mirostat": 2},
        {"typical_p": 0.5},
        {"num_keep": 5},
        {"use_mlock": True},
        {"penalize_newline": True},
    ],
)
def test_an_option_juggler_cannot_honour_is_refused_by_name(options: dict[str, Any]) -> None:
    with pytest.raises(NotImplementedParam) as err:
        oo.split_options(options)
    assert err.value.param == f"options.{next(iter(options))}"


def test_engine_flags_replace_their_old_values() -> None:
    assert (
        oo.merge_engine_args("--workers 2 --threads 4", "--threads 1") == "--workers 2 --threads 1"
    )


def test_names_get_ollamas_default_tag() -> None:
    assert ol.ollama_name("SmolLM2-135M-Instruct-GGUF") == "SmolLM2-135M-Instruct-GGUF:latest"
    assert ol.ollama_name("hf.co/a/b:Q4_0") == "hf.co/a/b:Q4_0"
    assert ol.ollama_name("ns/model") == "ns/model:latest"


def test_generate_maps_raw_to_completions_and_the_rest_to_chat() -> None:
    raw = ol.GenerateBody(model="m", prompt="x", raw=True)
    assert rq.generate_request(raw) == ("/v1/completions", {"prompt": "x"})
    chat = ol.GenerateBody(model="m", prompt="x", system="s")
    path, body = rq.generate_request(chat)
    assert path == "/v1/chat/completions"
    assert body["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "x"},
    ]
    with pytest.raises(NotImplementedParam, match="suffix"):
        rq.generate_request(ol.GenerateBody(model="m", prompt="x", suffix="y"))


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model="", max_body_bytes=4096), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_version_tags_and_errors_in_ollamas_shape(client: TestClient) -> None:
    assert client.get("/api/version").json()["version"] == ol.API_VERSION
    names = [m["name"] for m in client.get("/api/tags").json()["models"]]
    assert "SmolLM2-135M-Instruct-GGUF:latest" in names
    r = client.post("/api/show", json={"model": "nope"})
    assert r.status_code == 404 and isinstance(r.json()["error"], str)
    r = client.post("/api/chat", json={"model": "x", "messages": "hi"})
    assert r.status_code == 400 and "messages" in r.json()["error"]
    assert client.get("/api/ps").json() == {"models": []}
    # Lemonade's routes keep OpenAI's error shape
    assert isinstance(client.get("/api/v1/models/nope").json()["error"], dict)


def test_blobs_are_checked_against_their_digest_and_not_held_to_max_body_bytes(
    client: TestClient,
) -> None:
    data = b"GGUF" + b"\x07" * 10_000  # larger than max_body_bytes (4096)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert client.head(f"/api/blobs/{digest}").status_code == 404
    bad = client.post(f"/api/blobs/{digest}", content=data + b"!")
    assert bad.status_code == 400
    assert client.post(f"/api/blobs/{digest}", content=data).status_code == 201
    assert client.head(f"/api/blobs/{digest}").status_code == 200
    assert client.post("/api/blobs/sha256:nothex", content=b"x").status_code == 400
    assert client.post("/api/chat", content=b"x" * 5000).status_code == 413


def _chunks(size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, size, chunk):
        yield b"\x07" * min(chunk, size - start)


def _blob_files(home: Path) -> list[Path]:
    return list((home / "models" / "blobs").glob("*"))


@pytest.fixture()
def small_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    settings = Settings(model="", max_upload_bytes=1024 * 1024)
    with TestClient(create_app(settings, Registry(tmp_path / "home")), base_url=LOCAL) as c:
        yield c


def test_an_upload_over_max_upload_bytes_is_413_by_length_or_by_count(
    small_uploads: TestClient, tmp_path: Path
) -> None:
    """Declared too large: refused before a byte is read. Sent without a length (or
    with a false one): refused once the count passes the limit. No file is left."""
    data = b"\x07" * (1024 * 1024 + 1)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = small_uploads.post(f"/api/blobs/{digest}", content=data)
    assert r.status_code == 413 and "max_upload_bytes" in r.json()["error"]
    r = small_uploads.post(f"/api/blobs/{digest}", content=_chunks(len(data)))
    assert r.status_code == 413 and "max_upload_bytes" in r.json()["error"]
    r = small_uploads.post(
        f"/api/blobs/{digest}", content=_chunks(len(data)), headers={"Content-Length": "10"}
    )
    assert r.status_code == 413
    assert _blob_files(tmp_path / "home") == []
    ok = b"\x07" * (1024 * 1024)
    r = small_uploads.post(f"/api/blobs/sha256:{hashlib.sha256(ok).hexdigest()}", content=ok)
    assert r.status_code == 201 and len(_blob_files(tmp_path / "home")) == 1


def test_an_upload_that_would_leave_under_1_gib_free_is_507(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Content-Length that would leave less than 1 GiB free on the model cache's disk
    is refused up front (the disk's real free space); counted while streaming, the
    upload stops where the reserve begins (the reserve raised to just under today's free
    space, so that a few MiB reach it) and leaves no partial file."""
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    blobs = tmp_path / "home" / "models" / "blobs"
    blobs.mkdir(parents=True)
    settings = Settings(model="", max_upload_bytes=1 << 60)
    with TestClient(create_app(settings, Registry(tmp_path / "home")), base_url=LOCAL) as client:
        digest = "sha256:" + "0" * 64
        headers = {"Content-Length": str(shutil.disk_usage(blobs).free)}
        r = client.post(f"/api/blobs/{digest}", content=b"GGUF", headers=headers)
        assert r.status_code == 507 and "free" in r.json()["error"]
        monkeypatch.setattr(uploads, "MIN_FREE_BYTES", shutil.disk_usage(blobs).free - (2 << 20))
        r = client.post(f"/api/blobs/{digest}", content=_chunks(64 << 20))
        assert r.status_code == 507 and "free" in r.json()["error"]
    assert list(blobs.glob("*")) == []


def test_an_upload_budget_measures_the_disk_again_as_it_fills() -> None:
    budget = uploads.UploadBudget(max_bytes=1 << 40, free_bytes=uploads.MIN_FREE_BYTES * 4)
    assert budget.take(uploads.RECHECK_BYTES - 1) is False
    assert budget.take(1) is True  # time to measure: another writer may have filled it
    budget.recheck(uploads.MIN_FREE_BYTES)
    with pytest.raises(InsufficientStorage):
        budget.recheck(uploads.MIN_FREE_BYTES - 1)
    with pytest.raises(PayloadTooLarge):
        uploads.UploadBudget(max_bytes=10, free_bytes=1 << 40).check_declared(11)


def test_create_needs_a_source_and_refuses_what_it_cannot_keep(client: TestClient) -> None:
    """Issue 49: "Bad values (... a Modelfile line Juggler cannot honour, a broken
    template) get a 400 naming them." Nothing is registered by a refused create."""
    r = client.post("/api/create", json={"model": "m"})
    assert r.status_code == 400
    smol = "SmolLM2-135M-Instruct-GGUF"
    refused = {
        "quantize": {"quantize": "q4_K_M"},
        "parameters.mirostat": {"parameters": {"mirostat": 2}},
        "parameters.nonsense": {"parameters": {"nonsense": 1}},
        "parameters.temperature": {"parameters": {"temperature": 9.0}},
        "parameters.num_predict": {"parameters": {"num_predict": "x"}},
        "parameters.num_gpu": {"parameters": {"num_gpu": 3}},
        "printf": {"template": '{{ printf "%s" .Prompt }}'},
        "{{ end }}": {"template": "{{ if .System }}x"},
        ".Foo": {"template": "{{ .Foo }}"},
        "messages[0]": {"messages": [{"role": "tool", "content": "x"}]},
        "adapters": {"adapters": {"a.gguf": "sha256:" + "0" * 64}},
        "requires": {"requires": "99.0.0"},
        "DRAFT": {"modelfile": f"FROM {smol}\nDRAFT ./small.gguf"},
        "FOO": {"modelfile": f"FROM {smol}\nFOO bar"},
        "line 2": {"modelfile": f"FROM {smol}\nMESSAGE robot hi"},
        "ADAPTER": {"modelfile": f"FROM {smol}\nADAPTER ./relative.gguf"},
    }
    for named, fields in refused.items():
        body = {"model": "m", "from": smol, **fields}
        if "modelfile" in fields:
            del body["from"]
        r = client.post("/api/create", json=body)
        assert r.status_code in (400, 404) and named in r.json()["error"], (named, r.text)
    names = [m["name"] for m in client.get("/api/tags").json()["models"]]
    assert "m:latest" not in names
    r = client.post(
        "/api/create", json={"model": "SmolLM2-135M-Instruct-GGUF", "from": "Gemma-3-270M-GGUF"}
    )
    assert r.status_code == 400  # a built-in name cannot be shadowed
    r = client.post(
        "/api/create",
        json={
            "model": "short",
            "from": "SmolLM2-135M-Instruct-GGUF",
            "parameters": {"num_ctx": 512},
            "stream": False,
        },
    )
    assert r.status_code == 200 and r.json() == {"status": "success"}
    shown = client.get("/api/v1/models/short").json()
    assert shown["recipe_options"] == {"ctx_size": 512}


def test_an_adapter_path_outside_the_model_folders_needs_the_owner(
    client: TestClient, tmp_path: Path
) -> None:
    """Issue 49: an ADAPTER "path must stay inside the model directories" for a client
    that may not register local files anywhere (the test client is not on loopback)."""
    outside = tmp_path / "lora.gguf"
    outside.write_bytes(b"GGUF")
    body = {"model": "m", "modelfile": f"FROM SmolLM2-135M-Instruct-GGUF\nADAPTER {outside}"}
    r = client.post("/api/create", json=body)
    assert r.status_code == 403 and "outside the model directories" in r.json()["error"]
    inside = tmp_path / "home" / "models" / "lora.gguf"
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_bytes(b"GGUF")
    body["modelfile"] = f"FROM SmolLM2-135M-Instruct-GGUF\nADAPTER {inside}"
    r = client.post("/api/create", json=body)  # allowed, read, and not a LoRA adapter
    assert r.status_code == 400 and r.json()["error"].startswith("adapters:"), r.text
    assert "m:latest" not in [m["name"] for m in client.get("/api/tags").json()["models"]]
