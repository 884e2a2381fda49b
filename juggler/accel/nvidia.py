"""NVIDIA GPUs through NVML (the pinned `nvidia-ml-py`, imported as `pynvml`).

NVML is what `nvidia-smi` reads: the GPUs, each one's memory, and what each process holds
on each (`nvmlDeviceGetComputeRunningProcesses`: nvidia-smi's per-process "GPU Memory
Usage"). It needs the driver's `libnvidia-ml`, which a headless server or VM has where
`/sys/class/drm` may list no card. Every call blocks briefly (a driver call); the router
runs them in a thread. Without the library, the driver or a device, `open_nvml` gives
None and nothing here raises.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("juggler.accel")


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML describes it now."""

    index: int
    name: str
    total_bytes: int
    used_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.total_bytes - self.used_bytes)

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "vram_total_bytes": self.total_bytes,
            "vram_used_bytes": self.used_bytes,
            "vram_free_bytes": self.free_bytes,
        }


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """An initialised NVML with at least one device. Calls are serialised (NVML's own
    calls are thread-safe, but the handles list is read by several threads)."""

    def __init__(self, module: Any) -> None:
        """`module`: `pynvml` (a fake in unit tests). Raises when NVML cannot start or
        finds no device."""
        self.nvml = module
        module.nvmlInit()
        count = int(module.nvmlDeviceGetCount())
        if count < 1:
            raise RuntimeError("NVML found no device")
        self.handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.names = [self._name(i, h) for i, h in enumerate(self.handles)]
        self._lock = threading.Lock()

    def _name(self, index: int, handle: Any) -> str:
        try:
            return _text(self.nvml.nvmlDeviceGetName(handle))
        except Exception:  # an old driver, or a device that does not say
            return f"NVIDIA GPU {index}"

    @property
    def num_devices(self) -> int:
        return len(self.handles)

    def gpus(self) -> list[Gpu]:
        """Every device with its memory now."""
        with self._lock:
            out = []
            for i, handle in enumerate(self.handles):
                info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append(Gpu(i, self.names[i], int(info.total), int(info.used)))
            return out

    def process_bytes(self) -> dict[int, int]:
        """GPU memory per process id, summed over devices (nvidia-smi's per-process
        figure). A process NVML cannot measure (no permission: `usedGpuMemory` None)
        is left out."""
        held: dict[int, int] = {}
        with self._lock:
            for handle in self.handles:
                for proc in self._processes(handle):
                    used = getattr(proc, "usedGpuMemory", None)
                    if isinstance(used, int) and used >= 0:
                        held[int(proc.pid)] = held.get(int(proc.pid), 0) + used
        return held

    def _processes(self, handle: Any) -> list[Any]:
        found: list[Any] = []
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            call = getattr(self.nvml, name, None)
            if call is None:
                continue
            try:
                found.extend(call(handle))
            except Exception as exc:  # not supported on this device or driver
                log.debug("nvml: %s failed: %s", name, exc)
        return found


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


_lock = threading.Lock()


@functools.cache
def open_nvml() -> Nvml | None:
    """This process's NVML, opened once; None without the library, a driver or a device."""
    with _lock:
        try:
            return Nvml(_import_pynvml())
        except Exception as exc:  # no library, no driver or no device
            log.debug("nvml: not available (%s)", exc)
            return None


def nvidia_present(dev_root: Path = Path("/dev"), nvml: Nvml | bool | None = True) -> bool:
    """Whether this machine has an NVIDIA GPU: NVML counts a device, or the driver made
    its device node (`/dev/nvidia0`, which a container may pass in without NVML).
    `nvml`: True opens this process's NVML; None or an `Nvml` is taken as given."""
    found = open_nvml() if nvml is True else nvml
    if isinstance(found, Nvml) and found.num_devices > 0:
        return True
    return any(dev_root.glob("nvidia[0-9]*"))
