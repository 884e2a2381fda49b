"""Recipes, load options and the engine's command line: fast, no processes started."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from juggler.errors import BadRequest, CheckpointMissing, RecipeNotInstalled
from juggler.manager.llamacpp import GpuView
from juggler.manager.recipes import NpuBackend, plan_launch
from juggler.types import Device, ModelInfo

from .conftest import resolve_path, settings


def test_load_values_beat_settings_beat_defaults() -> None:
    """Seed 000: "The priority order for defaults is now: 1. Values explicity passed in
    `load` ... 2. Values set by the user as `lemonade-server` CLI args or env vars.
    3. Default hardcoded values" """
    s = settings(ctx_size=1024, llamacpp_args="--workers 2")
    resolved = s.model_options({"ctx_size": 2048, "llamacpp_backend": None})
    assert resolved.ctx_size == 2048  # /load
    assert resolved.llamacpp_args == "--workers 2"  # settings (CLI/env/config)
    assert resolved.evict_weight_factor == 1.0  # built-in default


def test_launch_key_ignores_eviction_settings() -> None:
    """Issue 4: "the same model already loaded with the same options is a no-op" -- eviction
    tuning needs no reload; ctx size does."""
    s = settings()
    base = s.model_options().launch_key()
    assert s.model_options({"evict_idle_timeout": 5}).launch_key() == base
    assert s.model_options({"ctx_size": 1024}).launch_key() != base


def test_llamacpp_argv(tmp_path: Path) -> None:
    """Issue 9: the engine flags come from one declaration (`EngineFlags`); a client's
    `llamacpp_args` override the settings' workers, parallel and threads."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    info = ModelInfo(name="M", checkpoint=str(gguf), labels=("embeddings",))
    opts = settings().model_options({"ctx_size": 777, "llamacpp_args": "--parallel 3"})
    plan = plan_launch(info, opts, settings(threads=2, workers=1), resolve_path)
    argv = plan.argv(4242)
    assert argv[:3] == [sys.executable, "-m", "juggler.engine"]
    joined = " ".join(argv)
    assert f"--model-path {gguf} --model-name M --host 127.0.0.1 --port 4242" in joined
    assert "--type embedding --ctx-size 777" in joined
    assert "--workers 1 --parallel 3 --threads 2 --kv-cells 0 --n-gpu-layers 0" in joined
    assert plan.device == Device.CPU and plan.reports_device
    gpu = settings().model_options({"llamacpp_backend": "vulkan"})
    vulkan = GpuView(frozenset({"vulkan"}), frozenset({"vulkan"}))
    gpu_argv = plan_launch(info, gpu, settings(threads=0), resolve_path, gpu=vulkan).argv(1)
    assert "--n-gpu-layers 999" in " ".join(gpu_argv)
    assert "--threads" not in gpu_argv  # 0 (every core) is the engine's own default


def test_unparseable_command_template_is_bad_request() -> None:
    """Issue 9: "An unparseable `command` template in a `command` recipe (shlex ValueError,
    e.g. an unclosed quote) must become a BadRequest naming `command`, not a 500." -- and
    so is a placeholder the template cannot fill."""
    for command in (f"{sys.executable} 'unclosed", f"{sys.executable} --port {{nope}}"):
        info = ModelInfo(name="C", checkpoint="", recipe="command", command=command)
        with pytest.raises(BadRequest) as err:
            plan_launch(info, settings().model_options(), settings(), resolve_path)
        assert err.value.param == "command" and err.value.status == 400


def test_llamacpp_missing_file_is_checkpoint_missing(tmp_path: Path) -> None:
    """Seed 000: "Do not evict models if the WrappedServer failed to load because a file was
    not found on disk." -- the missing file is found before anything is queued."""
    info = ModelInfo(name="M", checkpoint=str(tmp_path / "nope.gguf"))
    with pytest.raises(CheckpointMissing):
        plan_launch(info, settings().model_options(), settings(), resolve_path)


def test_command_recipe_fills_template_per_token(tmp_path: Path) -> None:
    """Issue 4: "`command`: any OpenAI-compatible server started from a user-declared command
    template (`{port}`, `{model_path}`), with a health path and a declared device" """
    weights = tmp_path / "dir with space" / "w.gguf"
    weights.parent.mkdir()
    weights.write_bytes(b"x")
    info = ModelInfo(
        name="C",
        checkpoint=str(weights),
        recipe="command",
        device="gpu|npu",
        command=f"{sys.executable} -m server -m {{model_path}} --port {{port}}",
        health_path="/v1/models",
    )
    plan = plan_launch(info, settings().model_options(), settings(), resolve_path)
    assert plan.argv(9) == [sys.executable, "-m", "server", "-m", str(weights), "--port", "9"]
    assert plan.device == Device.GPU | Device.NPU
    assert plan.npu_backend is NpuBackend.EXCLUSIVE
    assert plan.health_path == "/v1/models"


def test_command_without_checkpoint_has_empty_model_path() -> None:
    info = ModelInfo(name="C", checkpoint="", recipe="command", command=f"{sys.executable} x")
    plan = plan_launch(info, settings().model_options(), settings(), resolve_path)
    assert plan.model_path == "" and plan.npu_backend is None and plan.device == Device.GPU


@pytest.mark.parametrize(
    ("recipe", "exe"),
    [
        ("flm", "flm"),
        ("ryzenai-llm", "ryzenai-server"),
        ("whispercpp", "whisper-server"),
        ("oga-npu", "ryzenai-server"),
        ("oga-hybrid", "ryzenai-server"),
    ],
)
def test_vendor_recipe_not_installed(
    recipe: str, exe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 4: presets for the vendor recipes "fail with a clear "not installed" error
    (missing-file class) when it is not" """
    monkeypatch.setenv("PATH", str(tmp_path))
    info = ModelInfo(name="V", checkpoint=str(tmp_path), recipe=recipe)
    with pytest.raises(RecipeNotInstalled, match=exe):
        plan_launch(info, settings().model_options(), settings(), resolve_path)


def test_vendor_recipe_uses_executable_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 002 / issue 4: `flm` is an NPU recipe started from the vendor's executable."""
    exe = tmp_path / "flm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    info = ModelInfo(name="F", checkpoint="llama3.2:1b", recipe="flm")
    plan = plan_launch(info, settings().model_options(), settings(), resolve_path)
    assert plan.argv(5) == [str(exe), "serve", "llama3.2:1b", "--port", "5"]
    assert plan.device == Device.NPU and plan.npu_backend is NpuBackend.FLM


def test_unknown_recipe_is_not_installed() -> None:
    info = ModelInfo(name="U", checkpoint="x", recipe="magic")
    with pytest.raises(RecipeNotInstalled, match="Unknown recipe"):
        plan_launch(info, settings().model_options(), settings(), resolve_path)
