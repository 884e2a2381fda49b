"""Memory sources (issue 11: "NVIDIA through NVML, AMD through sysfs `mem_info_vram_used`
/ `mem_info_vram_total`, and on a machine without a GPU, system memory (MemAvailable)")
and seed 002's pure decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from juggler.manager import messages as m
from juggler.manager.memory import (
    AmdSysfsSource,
    MemorySample,
    NvmlSource,
    SystemMemorySource,
    choose_device_source,
    choose_source,
    kind_of,
)
from juggler.manager.monitor import Monitor
from juggler.manager.pressure import (
    Action,
    MemoryView,
    Step,
    eviction_score,
    idle_actions,
    relief_step,
)

GIB = 1 << 30


def amd_tree(root: Path, cards: dict[str, tuple[int, int]]) -> Path:
    for card, (used, total) in cards.items():
        dev = root / card / "device"
        dev.mkdir(parents=True)
        (dev / "mem_info_vram_used").write_text(f"{used}\n")
        (dev / "mem_info_vram_total").write_text(f"{total}\n")
    (root / "renderD128").mkdir()  # not a card: ignored
    return root


class FakeNvml:
    """The thin seam: the few pynvml calls the source makes."""

    def __init__(self, devices: list[tuple[int, int]]) -> None:
        self.devices = devices

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        used, total = self.devices[handle]
        return SimpleNamespace(used=used, total=total, free=total - used)


def test_amd_source_sums_every_card(tmp_path: Path) -> None:
    root = amd_tree(tmp_path / "drm", {"card0": (2 * GIB, 8 * GIB), "card1": (1 * GIB, 8 * GIB)})
    sample = AmdSysfsSource(root).sample()
    assert sample == MemorySample(3 * GIB, 16 * GIB)
    (root / "card0" / "device" / "mem_info_vram_used").write_text(f"{6 * GIB}\n")
    assert AmdSysfsSource(root).sample().fraction == pytest.approx(7 / 16)


def test_nvml_source_sums_every_device() -> None:
    source = NvmlSource(FakeNvml([(3 * GIB, 80 * GIB), (1 * GIB, 80 * GIB)]))
    assert source.sample() == MemorySample(4 * GIB, 160 * GIB) and source.name == "nvidia"


def test_system_source_counts_what_is_not_available(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:  100 kB\nMemAvailable:    250 kB\n")
    assert SystemMemorySource(meminfo).sample() == MemorySample(750 * 1024, 1000 * 1024)


def test_choose_source_falls_back_nvidia_then_amd_then_system(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
    drm = amd_tree(tmp_path / "drm", {"card0": (1, 2)})

    def no_nvml() -> Any:
        raise ImportError("pynvml")

    def nvml() -> Any:
        return FakeNvml([(1, 4)])

    assert choose_source(nvml=nvml, drm_root=drm, meminfo=meminfo).name == "nvidia"
    assert choose_source(nvml=no_nvml, drm_root=drm, meminfo=meminfo).name == "amd"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert choose_source(nvml=no_nvml, drm_root=empty, meminfo=meminfo).name == "system"
    assert (
        choose_source(nvml=lambda: FakeNvml([]), drm_root=empty, meminfo=meminfo).name == "system"
    )


def view(name: str, **kw: Any) -> MemoryView:
    base: dict[str, Any] = {"last_use": 0.0, "opted_in": True, "load_duration_s": 1.0}
    base.update(kw)
    return MemoryView(name, **base)


def test_score_is_idle_over_load_time_and_weight() -> None:
    """Seed 002: "eviction_score = idle_time_ms / (load_duration_ms * evict_weight_factor)"."""
    fast = view("fast", load_duration_s=1.0)
    slow = view("slow", load_duration_s=10.0)
    heavy = view("heavy", load_duration_s=1.0, evict_weight_factor=100.0)
    assert eviction_score(fast, now=5.0) == pytest.approx(5000 / 1000)
    assert eviction_score(fast, 5.0) > eviction_score(slow, 5.0) > eviction_score(heavy, 5.0)


def test_idle_timeouts_downsize_then_evict_and_say_when_next() -> None:
    """Seed 002: soft idle after downsize_idle_timeout, hard idle after evict_idle_timeout;
    busy, pinned and opted-out models are never touched."""
    views = [
        view("soft", downsizable_bytes=100, downsize_idle_timeout_s=10, evict_idle_timeout_s=100),
        view("hard", downsizable_bytes=100, downsize_idle_timeout_s=10, evict_idle_timeout_s=20),
        view("busy", in_flight=1, downsizable_bytes=100, downsize_idle_timeout_s=0),
        view("pinned", pinned=True, downsizable_bytes=100, downsize_idle_timeout_s=0),
        view("out", opted_in=False, downsizable_bytes=100, downsize_idle_timeout_s=0),
        view("done", is_downsized=True, downsizable_bytes=100, evict_idle_timeout_s=50),
        view("cmd", downsize_idle_timeout_s=0, evict_idle_timeout_s=40),  # cannot downsize
    ]
    actions, next_at = idle_actions(views, now=25.0)
    assert actions == [Action(Step.DOWNSIZE, "soft"), Action(Step.EVICT, "hard")]
    assert next_at == 40.0  # "cmd" is evicted next
    assert idle_actions(views, now=5.0)[1] == 10.0


def test_pressure_downsizes_when_that_is_enough_else_evicts_the_most_disposable() -> None:
    """Issue 11: "Prefer downsizing idle models before evicting any when that is enough
    to go below the threshold"; otherwise evict by seed 002's score."""
    sample = MemorySample(95, 100)  # threshold 0.90: 5 over
    old = view("old", last_use=0.0, downsizable_bytes=3)
    new = view("new", last_use=9.0, downsizable_bytes=3)
    assert relief_step([old, new], sample, 0.90, now=10.0) == Action(Step.DOWNSIZE, "old")
    small = [view("old", downsizable_bytes=1), view("new", last_use=9.0, downsizable_bytes=1)]
    assert relief_step(small, sample, 0.90, now=10.0) == Action(Step.EVICT, "old")
    protected = view("old", downsizable_bytes=0, evict_weight_factor=1e12)
    assert relief_step([protected, view("new", last_use=9.0)], sample, 0.90, 10.0) == Action(
        Step.EVICT, "new"
    )
    assert relief_step([old, new], MemorySample(80, 100), 0.90, now=10.0) is None
    assert relief_step([view("p", pinned=True)], sample, 0.90, now=10.0) is None


class _Gpu:
    name = "gpu0"
    kind = "gpu"

    def sample(self) -> MemorySample:
        return MemorySample(6 * GIB, 8 * GIB)


class _Host:
    name = "host0"

    def sample(self) -> MemorySample:
        return MemorySample(2 * GIB, 16 * GIB)


def test_the_monitor_watches_the_gpus_memory_and_the_hosts() -> None:
    """Issue 48: "seed 002's memory management watches VRAM the way it watches RAM":
    another source behind the one sampling interface; the first one is health's."""
    posted: list[m.Message] = []

    async def scenario() -> None:
        monitor = Monitor(_Gpu(), posted.append, interval_s=0.01, more=[_Host()])
        monitor.ensure(True)
        while len(posted) < 2:
            await asyncio.sleep(0.005)
        await monitor.close()
        assert monitor.source is not None and monitor.source.name == "gpu0"
        assert monitor.last == MemorySample(6 * GIB, 8 * GIB)

    asyncio.run(scenario())
    got = [(p.memory, p.sample.total_bytes) for p in posted[:2] if isinstance(p, m.MemorySampled)]
    assert got == [("gpu", 8 * GIB), ("host", 16 * GIB)]


def test_no_gpu_source_without_nvml_or_an_amd_card(tmp_path: Path) -> None:
    def no_nvml() -> Any:
        raise ImportError("pynvml")

    assert choose_device_source(nvml=no_nvml, drm_root=tmp_path) is None
    nvidia = choose_device_source(nvml=lambda: FakeNvml([(1, 4)]), drm_root=tmp_path)
    assert nvidia is not None and nvidia.name == "nvidia" and kind_of(nvidia) == "gpu"
    assert kind_of(SystemMemorySource()) == "host"
