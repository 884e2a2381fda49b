"""Issue 48's GPU check (`scripts/gpu-check.sh`), rehearsed on this machine's CPU as
docs/gpu.md describes it: the kit is made (the pinned llama.cpp sources and Python
package, Juggler's files, wheels, the tokenizer), then run with the installed library
instead of a CUDA build, the tiny model, one stream. A GPU session has minutes, not
hours: a kit that breaks here (a library the engine now loads that the kit does not
point at, a file it no longer carries) would waste them. Without `bench/_build`'s
llama-server (not built by `make`), its rows are left out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from juggler.accel.library import library_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_from_its_kit(tmp_path: Path) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    kit = tmp_path / "kit"
    made = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), "kit", str(kit), "--python", version],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert (kit / "gpu-check.sh").is_file() and list((kit / "wheels").glob("*.whl"))
    lib = library_dir({})  # the installed package's own
    assert lib is not None
    no_llama_server = tmp_path / "bin"
    no_llama_server.mkdir()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "GPU_CHECK_BACKEND": "cpu",
        "GPU_CHECK_LIB": str(lib),
        "GPU_CHECK_BIN": str(no_llama_server),
        "GPU_CHECK_MODEL": "tiny",
        "GPU_CHECK_LEVELS": "1",
        "GPU_CHECK_MODES": "plain",
        "GPU_CHECK_TARGET": "64",
        "GPU_CHECK_WORK": str(tmp_path / "work"),
    }
    ran = subprocess.run(
        [str(kit / "gpu-check.sh"), "run"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=kit,
        env=env,
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out[-4000:]
    assert "automatic layers: device cpu, layers 0/3, VRAM 0 MiB" in out, out[-4000:]
    assert "n_gpu_layers 1: 400" in out
    assert "median tok/s\n" in out and "1 plain" in out, out[-4000:]
