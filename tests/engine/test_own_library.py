"""A llama.cpp built apart from llama-cpp-python's package (issue 48: "A llama.cpp you
built yourself can be used instead: set `LLAMA_CPP_LIB_PATH` to the folder with its
`libllama.so`"), as the GPU check builds it: the backend loads the image projector's
library (`libmtmd`) from that folder too, not from the package's own `lib` folder, which
a package installed from source without its libraries does not have (the GPU check's
kit) and which would otherwise be a second, other build of ggml in the process.

A real backend process: llama-cpp-python's Python package copied without its `lib`
folder ahead of the installed one on `PYTHONPATH`, `LLAMA_CPP_LIB_PATH` the installed
package's `lib` folder (libllama, ggml and libmtmd)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from juggler.accel.library import (
    LIB_PATH_ENV,
    MTMD_PATH_ENV,
    library_dir,
    projector_library_dir,
)
from juggler.manager.child_env import child_env
from tests.engine.conftest import start_backend

pytestmark = pytest.mark.slow


def test_the_projector_library_comes_from_ones_own_build(tmp_path: Path) -> None:
    own = tmp_path / "build"
    own.mkdir()
    (own / "libllama.so").write_bytes(b"")
    assert projector_library_dir({LIB_PATH_ENV: str(own)}) is None, "no libmtmd there"
    (own / "libmtmd.so").write_bytes(b"")
    assert projector_library_dir({LIB_PATH_ENV: str(own)}) == own
    chosen = tmp_path / "mtmd"
    env = {LIB_PATH_ENV: str(own), MTMD_PATH_ENV: str(chosen)}
    assert projector_library_dir(env) == chosen, "MTMD_CPP_LIB set by hand wins"
    assert projector_library_dir({}) is None, "the package's own"
    assert projector_library_dir({LIB_PATH_ENV: str(tmp_path / "missing")}) is None
    assert child_env({}, env) == env, "backends inherit both"


def test_a_backend_runs_on_a_library_folder_of_its_own(
    smol_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = library_dir({})  # the installed package's own `lib` folder
    assert lib is not None
    installed = lib.parent
    assert any(p.name.startswith("libmtmd.") for p in (installed / "lib").iterdir())
    shadow = tmp_path / "python"
    shutil.copytree(
        installed, shadow / "llama_cpp", ignore=shutil.ignore_patterns("lib", "__pycache__")
    )
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.setenv(LIB_PATH_ENV, str(installed / "lib"))
    monkeypatch.delenv(MTMD_PATH_ENV, raising=False)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    backend = start_backend(smol_path, "own-lib", tmp_path)
    try:
        with backend.client() as c:
            r = c.post(
                "/v1/completions",
                json={"model": "own-lib", "prompt": "One, two,", "max_tokens": 4},
            )
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] >= 1
        # The copy without libraries is what the backend imported (its bytecode is there).
        assert (shadow / "llama_cpp" / "__pycache__").is_dir()
    finally:
        backend.stop()
