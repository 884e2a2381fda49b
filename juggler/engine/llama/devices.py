"""The devices and backends of the llama.cpp library this process loaded, from ggml's
own registry (`ggml_backend_dev_*`, `ggml_backend_reg_*`), and the library's path.

Issue 48: "the installed backends are read from the library actually loaded". The
symbols are ggml's, reached through the handle llama-cpp-python opened for `libllama`
(`dlsym` searches a library's dependencies too). Read on the main thread after
`native.init_backend`; each call is cheap (the registry is built once by ggml).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp.llama_cpp as C

#: ggml_backend_dev_type, by value.
_KINDS = ("cpu", "gpu", "igpu", "accel", "meta")


@dataclass(frozen=True)
class GgmlDevice:
    """One device ggml registered (`CPU`, `CUDA0`, `Vulkan0`, ...)."""

    name: str
    description: str
    kind: str
    backend: str
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu")

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "type": self.kind,
            "backend": self.backend,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
        }


def _bind() -> Any:
    lib = C._lib
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_count.argtypes = []
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.restype = None
    lib.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_count.argtypes = []
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    return lib


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def devices() -> list[GgmlDevice]:
    """Every device of the loaded library, with its memory now."""
    lib = _bind()
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = int(lib.ggml_backend_dev_type(dev))
        reg = lib.ggml_backend_dev_backend_reg(dev)
        out.append(
            GgmlDevice(
                name=_text(lib.ggml_backend_dev_name(dev)),
                description=_text(lib.ggml_backend_dev_description(dev)),
                kind=_KINDS[kind] if 0 <= kind < len(_KINDS) else str(kind),
                backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "",
                free_bytes=int(free.value),
                total_bytes=int(total.value),
            )
        )
    return out


def backends() -> list[str]:
    """The backends ggml registered (`CPU`, `CUDA`, `Vulkan`, ...)."""
    lib = _bind()
    return [
        _text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
        for i in range(int(lib.ggml_backend_reg_count()))
    ]


def library_path() -> str:
    """The `libllama` this process loaded (`LLAMA_CPP_LIB_PATH`, or the package's)."""
    return str(getattr(C._lib, "_name", ""))
