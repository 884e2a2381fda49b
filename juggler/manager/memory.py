"""Where memory pressure is read from (seed 002: "A background monitor samples global VRAM
usage (NVIDIA via nvidia-smi, AMD via sysfs on Linux)"), plus system memory so that a
machine without a GPU gets the same protection.

Two kinds of source behind one interface (`MemorySource`): the GPU's memory (`kind`
"gpu": NVIDIA through NVML when a device answers, else AMD through sysfs,
`mem_info_vram_used` / `mem_info_vram_total` of every card; `choose_device_source`) and
host memory (`kind` "host": `MemTotal - MemAvailable` from /proc/meminfo). Issue 48:
"seed 002's memory management watches VRAM the way it watches RAM": the monitor samples
both, and the residency policy reads the GPU's free memory and each process's share of
it (`process_bytes`, NVML's per-process figure, which nvidia-smi shows).
`choose_source()` is the first of them that works (the one health names). Each
`sample()` blocks briefly (a few file reads or NVML calls): callers run it in a thread.
Every source takes its root or its NVML module as an argument, so tests point it at a
tree they wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from juggler.accel.nvidia import Nvml

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


def kind_of(source: MemorySource) -> str:
    """ "gpu" for a source of GPU memory, else "host" (a source that does not say)."""
    return str(getattr(source, "kind", "host"))


def process_bytes_of(source: MemorySource | None) -> dict[int, int]:
    """GPU memory per process id, where the source can tell (NVML); else {}."""
    read = getattr(source, "process_bytes", None)
    return dict(read()) if read is not None else {}


class NvmlSource:
    """NVIDIA GPUs through NVML (`nvidia-ml-py`'s `pynvml`), summed over devices."""

    name = "nvidia"
    kind = "gpu"

    def __init__(self, nvml: Any) -> None:
        self.gpu = Nvml(nvml)

    def sample(self) -> MemorySample:
        gpus = self.gpu.gpus()
        return MemorySample(sum(g.used_bytes for g in gpus), sum(g.total_bytes for g in gpus))

    def process_bytes(self) -> dict[int, int]:
        return self.gpu.process_bytes()


class AmdSysfsSource:
    """AMD GPUs through the amdgpu driver's sysfs files, summed over cards."""

    name = "amd"
    kind = "gpu"

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
    kind = "host"

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


def choose_device_source(
    *, nvml: Callable[[], Any] = _import_nvml, drm_root: Path = Path("/sys/class/drm")
) -> MemorySource | None:
    """The GPU memory source that works here: NVML, then AMD sysfs; None without a GPU."""
    try:
        return NvmlSource(nvml())
    except Exception as exc:  # no library, no driver or no device: try the next one
        log.debug("memory: no NVIDIA source (%s)", exc)
    try:
        return AmdSysfsSource(drm_root)
    except RuntimeError as exc:
        log.debug("memory: no AMD source (%s)", exc)
    return None


def choose_source(
    *,
    nvml: Callable[[], Any] = _import_nvml,
    drm_root: Path = Path("/sys/class/drm"),
    meminfo: Path = Path("/proc/meminfo"),
) -> MemorySource:
    """The first source that works here: NVML, AMD sysfs, then system memory."""
    device = choose_device_source(nvml=nvml, drm_root=drm_root)
    return device if device is not None else SystemMemorySource(meminfo)


def process_rss(pid: int) -> int | None:
    """The resident memory of process `pid` in bytes (None if it is gone or unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
