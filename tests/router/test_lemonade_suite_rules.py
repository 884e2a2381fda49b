"""Issue 24: gaps Lemonade's own test suites (its commit e385039ed335) found, pinned on the
real router app in-process with nothing loaded, and on the pure rules behind them:
`/internal/set` with Lemonade's nested `llamacpp` section, the `/reranker` alias,
Ollama's push refused with 501, health's `recipe_options` without default eviction
settings, Lemonade's load options inside Ollama's `options`, `--reasoning-format none`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.engine_args import parse_llamacpp_args
from juggler.errors import BadRequest
from juggler.options import ModelOptions
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import HfRef, find_hf_file, hf_cache_dir, parse_checkpoint
from juggler.router.app import create_app
from juggler.router.lemonade import system_routes
from juggler.router.lemonade.schemas import LoadRequest, options_to_save, tombstones
from juggler.router.ollama import options as oo

LOCAL = "http://127.0.0.1"
ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model="", admin_api_key="admin-secret"), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_internal_set_takes_the_nested_llamacpp_section(client: TestClient) -> None:
    """Lemonade's configuration guide: "Backend-specific settings are nested under their
    backend name" (`llamacpp`: `backend`, `args`); its suite sends
    `{"llamacpp": {"backend": "cpu"}, "max_loaded_models": 2}` to /internal/set before
    every class, and its multi-model tests need the 2 to take effect."""
    body = {"llamacpp": {"backend": "cpu", "args": "--workers 2"}, "max_loaded_models": 2}
    r = client.post("/internal/set", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == {
        "llamacpp_backend": "cpu",
        "llamacpp_args": "--workers 2",
        "max_loaded_models": [2, 2, 2, 2, 2],
    }
    config = client.get("/internal/config", headers=ADMIN).json()
    assert config["max_models"]["llm"] == 2 and config["llamacpp_args"] == "--workers 2"


@pytest.mark.parametrize(
    ("section", "param"),
    [
        ({"device": "0"}, "llamacpp.device"),  # a Lemonade key Juggler does not have
        ({"backend": "tpu"}, "llamacpp_backend"),
        ({}, "llamacpp"),
    ],
)
def test_internal_set_refuses_what_the_nested_section_cannot_set(
    client: TestClient, section: dict[str, Any], param: str
) -> None:
    r = client.post("/internal/set", json={"llamacpp": section}, headers=ADMIN)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert client.get("/internal/config", headers=ADMIN).json()["llamacpp_backend"] == "cpu"


def test_reranker_is_an_alias_of_rerank(client: TestClient) -> None:
    """llamacpp.md: "Lemonade also accepts `/reranking` and `/reranker` as aliases — all
    three route to the same handler and behave identically"."""
    body = {"model": "no-such-model", "query": "q", "documents": ["a"]}
    answers = [client.post(f"/api/v1/{p}", json=body) for p in ("rerank", "reranker")]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[1].json()["error"]["code"] == answers[0].json()["error"]["code"]
    assert answers[0].json()["error"]["code"] == "model_not_found"  # not a missing route
    assert client.post("/v1/reranker", json=body).status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/api/v1/reranker"] and "post" in paths["/v1/reranker"]


def test_ollama_push_is_refused_with_501(client: TestClient) -> None:
    """Lemonade's ollama.md: "`POST /api/push` | Not supported | Returns 501" (Juggler has
    no registry to push to); the error is in Ollama's shape."""
    r = client.post("/api/push", json={"model": "test"})
    assert r.status_code == 501, r.text
    assert "push" in r.json()["error"]
    assert "/api/push" not in client.get("/openapi.json").json()["paths"]  # a refusal


def test_health_recipe_options_leave_default_eviction_settings_out() -> None:
    """lemonade.md, health: "`recipe_options` - Options used to load the model (e.g.,
    `"ctx_size"`, `"llamacpp_backend"`, `"llamacpp_args"`)"; Lemonade's suite checks that
    `auto_evict` and `evict_idle_timeout` are not there after an auto-load."""
    shown = ModelOptions().recipe_options()
    assert shown == {"ctx_size": 4096, "llamacpp_backend": "cpu", "llamacpp_args": ""}
    set_ = ModelOptions(evict_idle_timeout=1.0, auto_evict=True).recipe_options()
    assert set_["evict_idle_timeout"] == 1.0 and set_["auto_evict"] is True


def test_lemonade_load_options_in_ollama_options_stay_out_of_the_load() -> None:
    """Lemonade's suite (Ollama auto-load): "Ollama auto-load must forward only ctx_size to
    recipe_options. Request-scoped fields (temperature, top_p, num_predict, etc.) must
    not leak into persistent model-load settings" (`pinned`, `llamacpp_args`,
    `auto_evict`, `evict_idle_timeout` in `options`)."""
    options = {
        "num_ctx": 8192,
        "num_predict": 10,
        "temperature": 0.7,
        "pinned": True,
        "llamacpp_args": "--foo-bar",
        "auto_evict": True,
        "evict_idle_timeout": 1,
    }
    sampling, load = oo.split_options(oo.without_load_options(options))
    assert sampling == {"max_tokens": 10, "temperature": 0.7}
    assert load == {"ctx_size": 8192}
    # Outside Lemonade's load options an unknown option is still refused, naming it.
    with pytest.raises(BadRequest) as err:
        oo.split_options(oo.without_load_options({"ctx_size": 8192}))
    assert err.value.param == "options.ctx_size"


def test_reasoning_format_is_llama_servers_flag() -> None:
    """Lemonade's suite loads with `llamacpp_args: "--reasoning-format none"` (llama.cpp:
    leave thoughts unparsed in the message content), which Juggler honours (issue 49: the
    thinking is otherwise apart from the answer); a value llama.cpp lacks is refused,
    naming the flag."""
    assert parse_llamacpp_args("--reasoning-format none") == {"reasoning_format": "none"}
    assert parse_llamacpp_args("--reasoning-format=deepseek --workers 2") == {
        "reasoning_format": "deepseek",
        "workers": 2,
    }
    assert parse_llamacpp_args("--reasoning-budget 0") == {"reasoning_budget": 0}
    for text in ("--reasoning-format loud", "--reasoning-format", "--reasoning-budget 100"):
        with pytest.raises(BadRequest) as err:
            parse_llamacpp_args(text)
        assert "--reasoning-" in err.value.message


SMOL = "SmolLM2-135M-Instruct-GGUF"


def test_models_tell_context_length_and_list_aliases(client: TestClient) -> None:
    """openai.md: "`context_length` - Number of tokens the model can handle in one
    request. Uses the loaded value when the model is running and the configured
    `ctx_size` otherwise"; Lemonade's suite: "An alias and its loaded target must report
    the same context length" (an alias is listed under its own name)."""

    def shown() -> dict[str, dict[str, Any]]:
        return {m["id"]: m for m in client.get("/api/v1/models").json()["data"]}

    assert shown()[SMOL]["context_length"] == 4096  # the settings' ctx_size
    r = client.post(f"/api/v1/models/{SMOL}/options", json={"ctx_size": 8192})
    assert r.status_code == 200, r.text
    assert client.get(f"/api/v1/models/{SMOL}").json()["context_length"] == 8192
    client.delete(f"/api/v1/models/{SMOL}/options")
    r = client.post("/internal/set", json={"ctx_size": 2048}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert shown()[SMOL]["context_length"] == 2048
    r = client.post("/internal/aliases", json={"alias": "my-chat", "target": SMOL}, headers=ADMIN)
    assert r.status_code == 200, r.text
    listed = shown()
    assert listed["my-chat"]["checkpoint"] == listed[SMOL]["checkpoint"]
    assert listed["my-chat"]["context_length"] == 2048
    assert client.get("/api/v1/models/my-chat").json()["context_length"] == 2048


def test_automatic_context_length_is_the_resolved_size_never_the_sentinel(
    client: TestClient,
) -> None:
    """Issue 49: "with `ctx_size` automatic (-1), a model's `context_length` in `/models`
    is ... the resolved size (or the trained context before the first load), never absent
    or a sentinel" (Lemonade's test 006c: "ctx_size=-1 means 'size automatically' and
    must never be returned"; 006d: list and retrieve agree)."""
    r = client.post("/internal/set", json={"ctx_size": -1}, headers=ADMIN)
    assert r.status_code == 200, r.text
    listed = {m["id"]: m for m in client.get("/api/v1/models?show_all=true").json()["data"]}
    # On disk: the size a load now would choose, as the options API resolves it.
    resolved = client.get(f"/api/v1/models/{SMOL}/options").json()["resolved_ctx_size"]
    assert resolved > 0
    assert listed[SMOL]["context_length"] == resolved
    assert client.get(f"/api/v1/models/{SMOL}").json()["context_length"] == resolved
    # Not downloaded: the context the catalog says it was trained for.
    assert listed["Qwen3-0.6B-GGUF"]["downloaded"] is False
    assert listed["Qwen3-0.6B-GGUF"]["context_length"] == 40960 > 0
    # A saved -1 on one model, with a fixed size in the settings, is resolved the same.
    client.post("/internal/set", json={"ctx_size": 2048}, headers=ADMIN)
    assert client.post(f"/api/v1/models/{SMOL}/options", json={"ctx_size": -1}).status_code == 200
    assert client.get(f"/api/v1/models/{SMOL}").json()["context_length"] == resolved
    assert client.get("/api/v1/models/Gemma-3-270M-GGUF").json()["context_length"] == 2048


def test_a_null_load_option_skips_the_saved_one_for_this_load_only() -> None:
    """lemonade.md, /load: "Passing explicit `null` ignores only that saved key for this
    load and falls through to the lower default layers without changing
    `recipe_options.json`. [...] With `save_options: true`, concrete values are persisted
    as usual while a `null` tombstone preserves the existing saved value for that key"."""
    body = LoadRequest.model_validate(
        {"model_name": SMOL, "llamacpp_args": None, "ctx_size": 2048, "save_options": True}
    )
    assert tombstones(body) == {"llamacpp_args"}
    assert tombstones(LoadRequest.model_validate({"model_name": SMOL})) == frozenset()
    saved = {"llamacpp_args": "--threads 1", "evict_idle_timeout": 60.0}
    given = {"ctx_size": 2048, "llamacpp_args": None, "auto_evict": None}
    # "Any previously stored value is replaced": evict_idle_timeout goes, the null keeps.
    assert options_to_save(saved, given, tombstones(body)) == {
        "ctx_size": 2048,
        "llamacpp_args": "--threads 1",
    }


def test_a_hugging_face_checkpoint_may_name_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lemonade's checkpoints name a repository's file after the colon (lemonade.md:
    `"ggml-org/gemma-3-4b-it-GGUF:mmproj-model-f16.gguf"`; its suite registers
    `unsloth/SmolLM2-135M-Instruct-GGUF:SmolLM2-135M-Instruct-Q2_K.gguf`, and Juggler's
    own catalog has such an entry); a bare relative path stays refused."""
    text = "unsloth/SmolLM2-135M-Instruct-GGUF:SmolLM2-135M-Instruct-Q2_K.gguf"
    ref = parse_checkpoint(text)
    assert ref == HfRef("unsloth", "SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q2_K.gguf")
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    assert isinstance(ref, HfRef)
    folder = hf_cache_dir(ref)
    folder.mkdir(parents=True)
    for name in ("SmolLM2-135M-Instruct-Q2_K.gguf", "SmolLM2-135M-Instruct-Q4_K_M.gguf"):
        (folder / name).write_bytes(b"GGUF")
    found = find_hf_file(ref)
    assert found is not None and found.name == "SmolLM2-135M-Instruct-Q2_K.gguf"
    for relative in ("models/x.gguf", "./a/b:c.gguf", "../a/b:c.gguf"):
        with pytest.raises(ValueError, match="relative path"):
            parse_checkpoint(relative)
    r = Registry(tmp_path).get("Qwen3-4B-Instruct-2507-GGUF")
    assert isinstance(parse_checkpoint(r.checkpoint), HfRef)


def test_system_info_lists_lemonades_devices_and_recipes(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lemonade.md, system-info: "`amd_gpu` - Array of AMD GPUs", "`nvidia_gpu` - Array
    of NVIDIA GPUs", "`amd_npu` - AMD NPU device", and "`recipes` - Software recipes and
    their backend support status" (Lemonade's suite requires `amd_gpu`, `amd_npu` and the
    `whispercpp`, `sd-cpp`, `flm`, `ryzenai-llm` recipes). Devices come from the kernel's
    view; a vendor server is `installed` only when it is on PATH."""
    sys_root = tmp_path / "sys"
    for card, vendor in (("card0", "0x1002"), ("card1", "0x10de"), ("card0-DP-1", "0x1002")):
        (sys_root / "class/drm" / card / "device").mkdir(parents=True)
        (sys_root / "class/drm" / card / "device/vendor").write_text(vendor + "\n")
    assert [g["name"] for g in system_routes._gpus("0x1002", sys_root)] == ["AMD GPU (card0)"]
    assert len(system_routes._gpus("0x10de", sys_root)) == 1
    assert not system_routes._amd_npu_present(sys_root)
    driver = sys_root / "bus/pci/drivers/amdxdna"
    driver.mkdir(parents=True)
    (sys_root / "class/accel/accel0/device").mkdir(parents=True)
    (sys_root / "class/accel/accel0/device/driver").symlink_to(driver)
    assert system_routes._amd_npu_present(sys_root)

    binaries = tmp_path / "bin"
    binaries.mkdir()
    (binaries / "flm").write_text("#!/bin/sh\n")
    (binaries / "flm").chmod(0o755)
    monkeypatch.setenv("PATH", str(binaries))
    info = client.get("/api/v1/system-info").json()
    devices = info["devices"]
    assert isinstance(devices["amd_gpu"], list) and isinstance(devices["nvidia_gpu"], list)
    assert isinstance(devices["amd_npu"]["available"], bool)
    recipes = info["recipes"]
    assert recipes["flm"]["backends"]["default"]["state"] == "installed"
    assert recipes["flm"]["default_backend"] == "default"
    for name in ("whispercpp", "ryzenai-llm", "sd-cpp"):
        backend = recipes[name]["backends"]["default"]
        assert backend["state"] == "unsupported" and backend["message"]
        assert "default_backend" not in recipes[name]
