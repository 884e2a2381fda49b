"""Where memory pressure is read from (seed 002: "A background monitor samples global VRAM
usage (NVIDIA via nvidia-smi, AMD via sysfs on Linux)"), plus system memory so that a
machine without a GPU gets the same protection.

`choose_source()` picks one at start: NVIDIA through NVML when a device answers, else AMD
through sysfs (`mem_info_vram_used` / `mem_info_vram_total` of every card), else system
memory (`MemTotal - MemAvailable` from /proc/meminfo). Each `sample()` blocks briefly
(a few file reads or NVML calls): the monitor runs it in a thread. Every source takes
its root or its NVML module as an argument, so tests point it at a tree they wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("juggler.manager")


@dataclass(frozen=True)
class MemorySample:
    used_bytes: int
    total_bytes: int

    @property
    def fraction(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


class MemorySource(Protocol):
    #: "nvidia", "amd" or "system", as health shows it.
    name: str

    def sample(self) -> MemorySample:
        """Current usage across every device of this kind. Blocks briefly."""
        ...


class NvmlSource:
    """NVIDIA GPUs through NVML (`nvidia-ml-py`'s `pynvml`), summed over devices."""

    name = "nvidia"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]
        if not self.handles:
            raise RuntimeError("NVML found no device")

    def sample(self) -> MemorySample:
        used = total = 0
        for handle in self.handles:
            info = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            used += int(info.used)
            total += int(info.total)
        return MemorySample(used, total)


class AmdSysfsSource:
    """AMD GPUs through the amdgpu driver's sysfs files, summed over cards."""

    name = "amd"

    def __init__(self, drm_root: Path = Path("/sys/class/drm")) -> None:
        self.devices = sorted(
            p.parent
            for p in drm_root.glob("card*/device/mem_info_vram_total")
            if p.parent.joinpath("mem_info_vram_used").is_file()
        )
        if not self.devices:
            raise RuntimeError(f"no amdgpu card under {drm_root}")

    def sample(self) -> MemorySample:
        used = total = 0
        for device in self.devices:
            used += int((device / "mem_info_vram_used").read_text().strip())
            total += int((device / "mem_info_vram_total").read_text().strip())
        return MemorySample(used, total)


class SystemMemorySource:
    """Host memory: what is not available to new allocations counts as used."""

    name = "system"

    def __init__(self, meminfo: Path = Path("/proc/meminfo")) -> None:
        self.meminfo = meminfo
        self.sample()  # fail now, not in the monitor, if the file is unreadable

    def sample(self) -> MemorySample:
        values: dict[str, int] = {}
        for line in self.meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                values[key] = int(rest.split()[0]) * 1024
        total = values["MemTotal"]
        return MemorySample(total - values.get("MemAvailable", 0), total)


def _import_nvml() -> Any:
    import pynvml

    return pynvml


def choose_source(
    *,
    nvml: Callable[[], Any] = _import_nvml,
    drm_root: Path = Path("/sys/class/drm"),
    meminfo: Path = Path("/proc/meminfo"),
) -> MemorySource:
    """The first source that works here: NVML, AMD sysfs, then system memory."""
    try:
        return NvmlSource(nvml())
    except Exception as exc:  # no library, no driver or no device: try the next one
        log.debug("memory: no NVIDIA source (%s)", exc)
    try:
        return AmdSysfsSource(drm_root)
    except RuntimeError as exc:
        log.debug("memory: no AMD source (%s)", exc)
    return SystemMemorySource(meminfo)


def process_rss(pid: int) -> int | None:
    """The resident memory of process `pid` in bytes (None if it is gone or unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
