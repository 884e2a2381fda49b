"""Immutable views of the residency table, for routes (`/health`, `/internal/*`, CLI).

The owner task publishes one `TableSnapshot` after every message it handles; the
Manager's read methods read only that (never the owner's live table).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from juggler.compute.plan import Share
from juggler.manager.memory import MemorySample
from juggler.manager.policy import ServerView
from juggler.manager.vram import GpuUse
from juggler.options import ModelOptions
from juggler.types import MODEL_TYPE_ORDER, Device, ModelType


class ServerState(enum.Enum):
    """Lifecycle of one WrappedServer. Allowed transitions:

        loading  -> ready      the backend answered its health check
        loading  -> failed     it exited, timed out or could not start (terminal)
        ready    -> evicting   chosen as a victim, unloaded, or the manager stops
        ready    -> dead       its process exited on its own (terminal; slot freed)
        evicting -> stopped    its process group is gone (terminal)

    Only the manager's owner task changes a server's state.
    """

    LOADING = "loading"
    READY = "ready"
    EVICTING = "evicting"
    STOPPED = "stopped"
    FAILED = "failed"
    DEAD = "dead"


class MemState(enum.Enum):
    """Seed 002's soft idle, for a READY server. Allowed transitions:

        active      -> downsizing   idle past downsize_idle_timeout, or memory pressure
        downsizing  -> downsized    the backend freed its contexts (weights stay)
        downsizing  -> active       the backend said no, or a request came meanwhile
        downsized   -> active       a request: the backend restores its contexts itself

    Only the owner task changes it.
    """

    ACTIVE = "active"
    DOWNSIZING = "downsizing"
    DOWNSIZED = "downsized"


def health_status(state: ServerState, memory: MemState, in_flight: int) -> str:
    """Issue 11: "Health shows `status` as one of loading, ready, in_use, downsizing,
    downsized, evicting, unloaded"."""
    if state is ServerState.READY:
        if memory is not MemState.ACTIVE:
            return str(memory.value)
        return "in_use" if in_flight else "ready"
    if state in (ServerState.LOADING, ServerState.EVICTING):
        return str(state.value)
    return "unloaded"


@dataclass(frozen=True)
class ServerSnapshot:
    """A copy of one WrappedServer at one moment; safe to keep and read anywhere."""

    #: Unique per load: a reloaded model is another server (session routes lease by it).
    server_id: int
    model_name: str
    checkpoint: str
    type: ModelType
    device: Device
    recipe: str
    backend_url: str
    pid: int | None
    last_use: float
    pinned: bool
    status: ServerState
    in_flight: int
    options: ModelOptions
    #: How many times this model has been loaded since the manager started.
    num_loads: int = 1
    load_duration_s: float | None = None
    memory_state: MemState = MemState.ACTIVE
    #: What a downsize frees (KV cache and compute buffers); 0: it cannot downsize.
    downsizable_bytes: int = 0
    #: Whether seed 002's memory management may downsize or evict it (auto_evict).
    auto_evict: bool = False
    #: The backend's command line (Lemonade's health `launch_command`).
    launch_command: tuple[str, ...] = ()
    #: Its share of the cores (issue 21's compute plan); None: outside the plan.
    compute: Share | None = None
    #: What llama.cpp placed on the GPU (issue 48).
    gpu: GpuUse = field(default_factory=GpuUse)

    @property
    def is_busy(self) -> bool:
        return self.in_flight > 0

    def to_health(self) -> dict[str, Any]:
        """Lemonade's `all_models_loaded` entry."""
        return {
            "model_name": self.model_name,
            "checkpoint": self.checkpoint,
            "last_use": self.last_use,
            "type": self.type.value,
            "device": self.device.label(),
            "recipe": self.recipe,
            "recipe_options": self.options.recipe_options(),
            "backend_url": self.backend_url,
            "launch_command": list(self.launch_command),
            "pid": self.pid,
            "pinned": self.pinned,
            "status": health_status(self.status, self.memory_state, self.in_flight),
            "auto_evict": self.auto_evict,
            "downsizable_bytes": self.downsizable_bytes,
            "is_busy": self.is_busy,
            "in_flight": self.in_flight,
            "num_loads": self.num_loads,
            "compute": self.compute.as_json() if self.compute is not None else None,
            "gpu_layers": self.gpu.as_json(),
            # Issue 51: launched with a vision projector (it takes images).
            "vision": "--mmproj" in self.launch_command,
        }


@dataclass(frozen=True)
class MemoryStatus:
    """The global switch, the threshold, the source and what it last measured."""

    auto_evict: bool
    threshold: float
    source: str
    is_monitoring: bool
    used_bytes: int | None = None
    total_bytes: int | None = None
    #: Every source the monitor samples: (name, "gpu" or "host", last sample or None).
    sources: tuple[tuple[str, str, MemorySample | None], ...] = ()

    def to_health(self) -> dict[str, Any]:
        return {
            "auto_evict": self.auto_evict,
            "auto_evict_threshold_pct": self.threshold,
            "source": self.source,
            "monitoring": self.is_monitoring,
            "used_bytes": self.used_bytes,
            "total_bytes": self.total_bytes,
            "sources": [
                {
                    "name": name,
                    "memory": kind,
                    "used_bytes": sample.used_bytes if sample else None,
                    "total_bytes": sample.total_bytes if sample else None,
                }
                for name, kind, sample in self.sources
            ],
        }


@dataclass(frozen=True)
class TableSnapshot:
    """The whole table at one moment, as the owner published it."""

    #: Slots per type, in MODEL_TYPE_ORDER; -1 = unlimited.
    limits: tuple[int, ...]
    #: Every server in the table, including ones loading or being evicted.
    servers: tuple[ServerSnapshot, ...] = ()
    #: The most recently loaded ready server (health's model_loaded).
    most_recent: ServerSnapshot | None = None
    #: The ready servers as the policy sees them (for `slots_all_pinned`).
    views: tuple[ServerView, ...] = ()
    #: Loads queued or running.
    num_queued: int = 0
    #: Counters since start (loads, load_failures, evictions, ...), sorted by name.
    counters: tuple[tuple[str, int], ...] = ()
    #: The watchdog's pending restarts: (model name, attempt, due at on the last_use clock).
    restarting: tuple[tuple[str, int, float], ...] = ()
    #: Models whose backend kept dying: the watchdog gave up on them.
    gave_up: tuple[str, ...] = ()
    #: Seed 002's memory management as it stands now.
    memory: MemoryStatus | None = None

    def limits_by_type(self) -> dict[ModelType, int]:
        return dict(zip(MODEL_TYPE_ORDER, self.limits, strict=True))
