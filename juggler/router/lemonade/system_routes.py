"""Lemonade's `GET /api/v1/system-info`, and clear refusals for the Lemonade routes that
belong to servers of other kinds (audio, images, speech, backend installers).

system-info tells what this machine has and which llama.cpp backends Juggler can use:
the CPU always; a GPU backend is `installed` when the llama.cpp library the backends load
(`LLAMA_CPP_LIB_PATH`, else llama-cpp-python's own, `accel.library`) was built for it and
the machine has its device (`accel.detect`); built without a device, or not built, it is
`unsupported` and says which (issue 48: "the installed backends are read from the
library actually loaded"). As Lemonade's, the devices always list `amd_gpu` and
`nvidia_gpu` (NVIDIA: the GPUs NVML finds, with their memory, else the kernel's DRM
cards of that PCI vendor, which a headless server may not have; maybe none) and
`amd_npu` (`available` when the amdxdna driver has an accel device), and the recipes
list the NPU vendor servers Juggler launches when they are on PATH (`installed`, else
`unsupported`: Juggler installs no backends) and `sd-cpp` (`unsupported`: image
generation is not built).
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from juggler.accel.detect import device_present
from juggler.accel.library import GGML_LIBS, library_dir, loaded_backends
from juggler.accel.nvidia import open_nvml
from juggler.errors import NotFound
from juggler.manager.recipes import RECIPES
from juggler.router.core.deps import state_of

router = APIRouter()

#: Lemonade routes for other kinds of models and for installing backends.
UNSUPPORTED = {
    "/audio/transcriptions": "audio transcription",
    "/audio/speech": "speech generation",
    "/images/generations": "image generation",
    "/install": "installing backends (llama.cpp comes with Juggler)",
    "/uninstall": "uninstalling backends (llama.cpp comes with Juggler)",
}


_AMD, _NVIDIA = "0x1002", "0x10de"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _gpus(vendor: str, sys_root: Path = Path("/sys")) -> list[dict[str, Any]]:
    """The GPUs of one PCI vendor among the kernel's DRM cards."""
    out: list[dict[str, Any]] = []
    for card in sorted((sys_root / "class" / "drm").glob("card[0-9]*")):
        device = card / "device"
        if "-" in card.name or _read(device / "vendor") != vendor:
            continue
        brand = "AMD" if vendor == _AMD else "NVIDIA"
        name = _read(device / "product_name") or f"{brand} GPU ({card.name})"
        out.append({"name": name, "available": True})
    return out


def _amd_npu_present(sys_root: Path = Path("/sys")) -> bool:
    """An accel device bound to the amdxdna driver (AMD's NPU)."""
    return any(
        (accel / "device" / "driver").resolve().name == "amdxdna"
        for accel in (sys_root / "class" / "accel").glob("accel*")
    )


def _vendor_recipe(name: str) -> dict[str, Any]:
    """An NPU vendor server Juggler launches when its executable is on PATH."""
    recipe = RECIPES[name]
    found = any(shutil.which(e) for e in recipe.executables)
    missing = f"{' or '.join(recipe.executables)} is not on PATH (Juggler installs no backends)"
    backend = {
        "devices": ["amd_npu"],
        "state": "installed" if found else "unsupported",
        "message": "" if found else missing,
        "action": "",
    }
    out: dict[str, Any] = {"backends": {"default": backend}}
    if found:
        out["default_backend"] = "default"
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
    return round(pages * size / 1e9, 1)


def _nvidia_gpus(sys_root: Path = Path("/sys")) -> list[dict[str, Any]]:
    """NVIDIA GPUs: what NVML finds (with their memory), else the DRM cards. Blocks
    briefly (a driver call)."""
    nvml = open_nvml()
    if nvml is not None:
        return [{**gpu.as_json(), "available": True} for gpu in nvml.gpus()]
    return _gpus(_NVIDIA, sys_root)


def _backend(name: str, built: frozenset[str], present: bool) -> dict[str, Any]:
    """One llama.cpp backend's state (see the module doc)."""
    ok = name in built and present
    if ok:
        message = ""
    elif name in built:
        message = f"llama.cpp was built with {name}, but this machine has no device for it"
    else:
        message = f"llama.cpp was built without {name}"
    return {
        "devices": ["gpu"] if ok else [],
        "state": "installed" if ok else "unsupported",
        "message": message,
        "action": "",
    }


@router.get("/system-info")
async def system_info(request: Request) -> dict[str, Any]:
    settings = state_of(request).settings
    memory = _memory_gb()
    built = loaded_backends()
    present = {name: await asyncio.to_thread(device_present, name) for name in built}
    nvidia = await asyncio.to_thread(_nvidia_gpus)

    return {
        "OS Version": platform.platform(),
        "Processor": _cpu_name(),
        "Physical Memory": f"{memory} GB" if memory is not None else "unknown",
        "devices": {
            "cpu": {
                "name": _cpu_name(),
                "cores": os.cpu_count(),
                "threads": os.cpu_count(),
                "available": True,
                "family": platform.machine(),
            },
            "amd_gpu": _gpus(_AMD),
            "nvidia_gpu": nvidia,
            "amd_npu": {"name": _cpu_name(), "available": _amd_npu_present()},
        },
        "recipes": {
            "llamacpp": {
                "default_backend": settings.llamacpp_backend,
                "library": str(library_dir() or ""),
                "backends": {
                    "cpu": {"devices": ["cpu"], "state": "installed", "message": "", "action": ""},
                    **{n: _backend(n, built, present.get(n, False)) for n in GGML_LIBS},
                },
            },
            **{name: _vendor_recipe(name) for name in ("whispercpp", "flm", "ryzenai-llm")},
            "sd-cpp": {
                "backends": {
                    "default": {
                        "devices": [],
                        "state": "unsupported",
                        "message": "image generation is not built in Juggler",
                        "action": "",
                    }
                }
            },
        },
    }


def _refuse(what: str) -> Any:
    async def refuse() -> None:
        raise NotFound(
            f"{what} is not supported: Juggler serves LLM, embedding and reranking models"
        )

    return refuse


for _path, _what in UNSUPPORTED.items():
    router.add_api_route(_path, _refuse(_what), methods=["POST"], include_in_schema=False)
