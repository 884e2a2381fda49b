"""The environment a backend process starts with (issue 52: a backend gets only what it
needs, never the router's secrets)."""

from __future__ import annotations

import os
from collections.abc import Mapping

#: What a backend inherits of the router's environment (issue 52): what a program needs
#: to run (paths, locale, the Python it runs in) and to find its devices and threads
#: (CUDA, ROCm, Vulkan, oneAPI, OpenMP, BLAS, ggml). Nothing else: never the router's
#: settings and keys (`JUGGLER_*`: `JUGGLER_API_KEY`, `JUGGLER_ADMIN_API_KEY`) nor other
#: credentials it holds (`HF_TOKEN`), since `command` backends are other people's
#: programs. A backend gets its own settings in argv and its key, board and adapter book
#: in `extra`.
INHERITED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "TEMP",
        "TMP",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        # llama-cpp-python loads libllama from this folder (a GPU build, issue 48), and
        # libmtmd (images) from this one.
        "LLAMA_CPP_LIB_PATH",
        "MTMD_CPP_LIB",
        "XDG_CACHE_HOME",
        "XDG_RUNTIME_DIR",
        "HF_HOME",
        "SYSTEMROOT",
    }
)
INHERITED_PREFIXES = (
    "LC_",
    "PYTHON",
    "CUDA_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "HSA_",
    "VK_",
    "ZE_",
    "ONEAPI_",
    "SYCL_",
    "GGML_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "MKL_",
)


def is_inherited(name: str) -> bool:
    """Whether a backend inherits the router's variable `name`."""
    return name in INHERITED or name.startswith(INHERITED_PREFIXES)


def child_env(
    extra: Mapping[str, str] | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A backend's environment: what it inherits of `environ` (this process's), plus
    `extra`."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if is_inherited(k)}
    env.update(extra or {})
    return env
