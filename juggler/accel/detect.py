"""Which llama.cpp backend a machine can run, and which one a load gets by default.

A GPU backend can run when the library has it (`library.loaded_backends`) and the machine
has a device for it: an NVIDIA GPU for `cuda` (`nvidia.nvidia_present`), an AMD GPU with
the ROCm kernel driver (`/dev/kfd`) for `rocm`, any GPU render node for `vulkan`, macOS for
`metal`. The default `llamacpp_backend` follows what `make install` built: the first
backend of `library.GPU_BACKENDS` that can run, else `cpu`. Reads files and NVML; cached
for the life of the process (a GPU does not come and go under a running server).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from juggler.accel.library import GPU_BACKENDS, loaded_backends
from juggler.accel.nvidia import nvidia_present

_AMD = "0x1002"


def _amd_gpu(sys_root: Path) -> bool:
    for vendor in (sys_root / "class" / "drm").glob("card[0-9]*/device/vendor"):
        try:
            if vendor.read_text().strip() == _AMD:
                return True
        except OSError:
            continue
    return False


def device_present(
    backend: str, *, sys_root: Path = Path("/sys"), dev_root: Path = Path("/dev")
) -> bool:
    """Whether this machine has a device that `backend` runs on (see the module doc)."""
    if backend == "cpu":
        return True
    if backend == "cuda":
        return nvidia_present(dev_root)
    if backend == "rocm":
        return (dev_root / "kfd").exists() and _amd_gpu(sys_root)
    if backend == "vulkan":
        return any((dev_root / "dri").glob("renderD*")) or nvidia_present(dev_root)
    if backend == "metal":
        return sys.platform == "darwin"
    return False


def pick_default(built: Collection[str], present: Callable[[str], bool]) -> str:
    """The first GPU backend that is built and has a device, else "cpu"."""
    return next((b for b in GPU_BACKENDS if b in built and present(b)), "cpu")


@functools.cache
def default_backend() -> str:
    """The backend a load gets when nobody chose one (see the module doc)."""
    return pick_default(loaded_backends(), device_present)
