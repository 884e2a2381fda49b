"""The llama.cpp library a backend loads, and the GPU backends it was built with.

llama-cpp-python loads `libllama` from `LLAMA_CPP_LIB_PATH` when that is set, else from
its own package's `lib` folder (`llama_cpp/_ctypes_extensions.py`), and the backends
inherit that variable (`manager.child_env`). ggml builds each backend as its own library
beside it (`libggml-cuda.so`, `libggml-vulkan.so`, `libggml-hip.so`, `libggml-metal`), so
the backends a library has are read from the names of the files in that folder, without
loading anything into the router (loading CUDA would take GPU memory there). The engine
process, which does load the library, asks ggml's registry instead
(`engine.llama.devices`) and reports what it found.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

#: The environment variable llama-cpp-python reads the library's folder from.
LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"
#: ... and the folder of `libmtmd`, the image projector's library (`engine.llama.media`).
MTMD_PATH_ENV = "MTMD_CPP_LIB"
#: Lemonade's backend names -> the name of ggml's backend library (`libggml-<name>`).
GGML_LIBS: dict[str, str] = {"cuda": "cuda", "vulkan": "vulkan", "rocm": "hip", "metal": "metal"}
#: The GPU backends in the order a default is chosen when a library has several.
GPU_BACKENDS: tuple[str, ...] = ("cuda", "rocm", "vulkan", "metal")


def library_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder the backends load `libllama` from: `LLAMA_CPP_LIB_PATH`, else the
    installed `llama_cpp` package's `lib` folder (None: no package found)."""
    env = os.environ if environ is None else environ
    override = env.get(LIB_PATH_ENV)
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def projector_library_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where a backend should load `libmtmd` from, when not from the package's own `lib`
    folder: `MTMD_CPP_LIB` when set, else the `LLAMA_CPP_LIB_PATH` folder when it holds a
    `libmtmd` (a llama.cpp build of one's own: its projector library was built with the
    same libllama and ggml). None: llama-cpp-python's default, the package's own."""
    env = os.environ if environ is None else environ
    if env.get(MTMD_PATH_ENV):
        return Path(env[MTMD_PATH_ENV])
    override = env.get(LIB_PATH_ENV)
    if not override:
        return None
    has_mtmd = any(n.startswith(("libmtmd.", "mtmd.")) for n in _file_names(override))
    return Path(override) if has_mtmd else None


def built_backends(folder: Path | None) -> frozenset[str]:
    """The GPU backends (Lemonade's names) whose ggml library is in `folder`."""
    if folder is None:
        return frozenset()
    return _built_in(str(folder))


@functools.lru_cache(maxsize=8)
def _built_in(folder: str) -> frozenset[str]:
    names = _file_names(folder)
    return frozenset(
        backend
        for backend, ggml in GGML_LIBS.items()
        if any(n.startswith(f"libggml-{ggml}.") or n.startswith(f"ggml-{ggml}.") for n in names)
    )


def loaded_backends(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """`built_backends` of the library the backends load (`library_dir`)."""
    return built_backends(library_dir(environ))


def _file_names(folder: str) -> list[str]:
    """The names in `folder` ([] where it cannot be listed: missing, not a folder)."""
    try:
        return [p.name for p in Path(folder).iterdir()]
    except OSError:
        return []
