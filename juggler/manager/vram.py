"""What each backend holds on the GPU, and what is free there (issue 48: "VRAM is
counted nowhere").

A llamacpp backend reports at load what llama.cpp placed on GPU devices (`GpuUse`, from
its /health). Where NVML answers, the figure a model is shown and weighed with is NVML's
per-process one (what nvidia-smi shows for the backend's pid: llama.cpp's buffers plus
the GPU runtime); elsewhere llama.cpp's buffers plus the runtime's estimate
(`offload.GPU_RUNTIME_BYTES`). `VramReader.read` blocks on a driver call or two.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from juggler.manager.memory import MemorySample, MemorySource, process_bytes_of
from juggler.manager.offload import GPU_RUNTIME_BYTES


@dataclass(frozen=True)
class GpuUse:
    """What a llamacpp backend reported about its GPU use when it became healthy."""

    #: llama.cpp's buffers on GPU devices (weights, and each worker's KV, compute and
    #: output buffers).
    vram_bytes: int = 0
    #: What a downsize frees there (the contexts' buffers).
    downsizable_vram_bytes: int = 0
    #: Layers llama.cpp offloaded, of how many.
    offloaded_layers: int = 0
    num_layers: int = 0

    @property
    def is_full(self) -> bool:
        return self.num_layers > 0 and self.offloaded_layers >= self.num_layers

    @classmethod
    def from_health(cls, body: Mapping[str, Any]) -> GpuUse:
        """From a llamacpp backend's /health body (zeros where it does not say)."""
        offload = body.get("offload") or {}
        memory = body.get("memory") or {}
        return cls(
            vram_bytes=_int(body.get("vram_bytes")),
            downsizable_vram_bytes=_int(memory.get("context_vram_bytes")),
            offloaded_layers=_int(offload.get("layers")),
            num_layers=_int(offload.get("of")),
        )

    def as_json(self) -> dict[str, Any]:
        return {"layers": self.offloaded_layers, "of": self.num_layers}


def _int(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def held_bytes(use: GpuUse, pid: int | None, per_pid: Mapping[int, int]) -> int:
    """What a backend holds on the GPU: NVML's figure for its pid when there is one,
    else llama.cpp's buffers plus the runtime's estimate (0 for a CPU backend)."""
    if pid is not None and pid in per_pid:
        return per_pid[pid]
    return use.vram_bytes + GPU_RUNTIME_BYTES if use.vram_bytes else 0


def shown_bytes(use: GpuUse, pid: int | None, per_pid: Mapping[int, int]) -> tuple[int, str]:
    """What health, `juggler ps`, the dashboard and /metrics show a backend holds on the
    GPU, and where the figure comes from: NVML's per-process figure ("nvml", what
    nvidia-smi shows) when it has the pid, else llama.cpp's own buffers ("llama.cpp")."""
    if pid is not None and pid in per_pid:
        return per_pid[pid], "nvml"
    return use.vram_bytes, "llama.cpp"


class VramReader:
    """The GPU's memory now and each process's share, from one memory source."""

    #: How old a cached per-process reading may be for a read-only view (`per_pid`).
    MAX_AGE_S = 1.0

    def __init__(self, source: MemorySource | None) -> None:
        self.source = source
        self._per_pid: dict[int, int] = {}
        self._read_at = -1e9

    @property
    def has_gpu(self) -> bool:
        return self.source is not None

    def read(self) -> tuple[MemorySample | None, dict[int, int]]:
        """(the GPU's memory, bytes per pid); (None, {}) without a GPU source. Blocks
        briefly; never raises for a driver that does not answer."""
        if self.source is None:
            return None, {}
        try:
            return self.source.sample(), process_bytes_of(self.source)
        except Exception:  # a driver hiccup: as if unknown
            return None, {}

    async def per_pid(self) -> dict[int, int]:
        """VRAM per process for views (health, /metrics): read in a thread at most once
        every `MAX_AGE_S` (the endpoint picker scrapes every 50 ms); {} without NVML."""
        if self.source is None or getattr(self.source, "process_bytes", None) is None:
            return {}
        now = time.monotonic()
        if now - self._read_at >= self.MAX_AGE_S:
            self._read_at = now
            self._per_pid = (await asyncio.to_thread(self.read))[1]
        return self._per_pid
