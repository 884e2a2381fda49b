"""Typed messages to the manager's owner task.

Every message is tagged with a `MsgKind`; the owner dispatches on the tag in one place
and logs what it does not know. Messages that expect an answer carry a Future that the
owner resolves (callers await it; a caller that gives up cancels it, and the owner skips
cancelled futures).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import ClassVar

from juggler.manager.lease import Lease
from juggler.manager.load_queue import LoadJob
from juggler.manager.memory import MemorySample
from juggler.manager.recipes import LaunchPlan
from juggler.manager.snapshot import ServerSnapshot
from juggler.manager.spawner import BackendProcess


class MsgKind(enum.Enum):
    ACQUIRE = "acquire"  # caller: a lease for a request (maybe auto-loading)
    LEASE = "lease"  # caller: a lease on one ready server, never loading
    LOAD = "load"  # caller: explicit /load
    UNLOAD = "unload"  # caller: /unload one or all
    PIN = "pin"  # caller: /internal/pin
    SET_LIMITS = "set_limits"  # caller: /internal/set max_loaded_models
    RELEASE = "release"  # lease: a request finished
    PROBE = "probe"  # caller: the router could not reach a backend
    LOAD_DONE = "load_done"  # load task: the backend is healthy, or failed
    EVICT_DONE = "evict_done"  # stop task: the process group is gone
    EXITED = "exited"  # watcher task: a ready backend's process exited
    PROBE_FAILED = "probe_failed"  # probe task: the backend does not answer
    TICK = "tick"  # idle timer: an auto_evict server may have reached its idle timeout
    REPLAN = "replan"  # compute planner timer: a busy server's linger ended
    RESTART_DUE = "restart_due"  # watchdog timer: restart a model whose backend died
    SET_MEMORY = "set_memory"  # caller: /internal/set auto_evict, auto_evict_threshold_pct
    SIMULATE = "simulate"  # caller: /internal/simulate-vram-pressure
    MEMORY_SAMPLED = "memory_sampled"  # monitor: a memory usage sample
    DOWNSIZE_DONE = "downsize_done"  # downsize task: the backend freed its contexts, or not
    STOP = "stop"  # Manager.stop


@dataclass(eq=False)
class Acquire:
    kind: ClassVar[MsgKind] = MsgKind.ACQUIRE
    name: str
    #: None on the first try: the owner answers None when a load is needed, and the
    #: caller prepares a plan (file checks, off the owner) and asks again.
    plan: LaunchPlan | None
    future: asyncio.Future[Lease | None]


@dataclass(eq=False)
class LeaseServer:
    kind: ClassVar[MsgKind] = MsgKind.LEASE
    server_id: int
    future: asyncio.Future[Lease]


@dataclass(eq=False)
class Load:
    kind: ClassVar[MsgKind] = MsgKind.LOAD
    plan: LaunchPlan
    pin: bool | None
    future: asyncio.Future[ServerSnapshot]


@dataclass(eq=False)
class Unload:
    kind: ClassVar[MsgKind] = MsgKind.UNLOAD
    name: str | None
    #: Answered with (model name, a future done when its process is gone) pairs.
    future: asyncio.Future[list[tuple[str, asyncio.Future[None]]]]


@dataclass(eq=False)
class Pin:
    kind: ClassVar[MsgKind] = MsgKind.PIN
    name: str
    pinned: bool
    future: asyncio.Future[ServerSnapshot]


@dataclass(eq=False)
class SetLimits:
    kind: ClassVar[MsgKind] = MsgKind.SET_LIMITS
    limits: tuple[int, ...]
    future: asyncio.Future[None]


@dataclass(eq=False)
class Release:
    kind: ClassVar[MsgKind] = MsgKind.RELEASE
    server_id: int


@dataclass(eq=False)
class Probe:
    kind: ClassVar[MsgKind] = MsgKind.PROBE
    server_id: int
    #: Settled once the owner has decided: dropped, stopping, or found healthy.
    future: asyncio.Future[None] | None = None


@dataclass(eq=False)
class LoadDone:
    kind: ClassVar[MsgKind] = MsgKind.LOAD_DONE
    job: LoadJob
    server_id: int
    #: The started backend, or None with `error`.
    process: BackendProcess | None
    error: Exception | None


@dataclass(eq=False)
class EvictDone:
    kind: ClassVar[MsgKind] = MsgKind.EVICT_DONE
    server_id: int


@dataclass(eq=False)
class Exited:
    kind: ClassVar[MsgKind] = MsgKind.EXITED
    server_id: int
    returncode: int


@dataclass(eq=False)
class ProbeFailed:
    kind: ClassVar[MsgKind] = MsgKind.PROBE_FAILED
    server_id: int
    future: asyncio.Future[None] | None = None


@dataclass(eq=False)
class Tick:
    kind: ClassVar[MsgKind] = MsgKind.TICK


@dataclass(eq=False)
class Replan:
    kind: ClassVar[MsgKind] = MsgKind.REPLAN


@dataclass(eq=False)
class SetMemory:
    kind: ClassVar[MsgKind] = MsgKind.SET_MEMORY
    #: None leaves a value as it is.
    auto_evict: bool | None
    threshold: float | None
    future: asyncio.Future[None]


@dataclass(eq=False)
class Simulate:
    kind: ClassVar[MsgKind] = MsgKind.SIMULATE
    #: Lemonade's `pct`: at or above the threshold, one pressure step as if usage were
    #: `pct`; -1, the idle timeouts now; anything else, nothing.
    pct: float
    #: The source's total, to turn `pct` into bytes (downsizing is weighed in bytes).
    total_bytes: int
    #: Answered with the actions taken, once downsizes are done and evictions started.
    future: asyncio.Future[list[tuple[str, str]]]


@dataclass(eq=False)
class MemorySampled:
    kind: ClassVar[MsgKind] = MsgKind.MEMORY_SAMPLED
    sample: MemorySample
    #: "gpu" (the GPU's memory) or "host" (system memory): `memory.kind_of`.
    memory: str = "host"


@dataclass(eq=False)
class DownsizeDone:
    kind: ClassVar[MsgKind] = MsgKind.DOWNSIZE_DONE
    server_id: int
    is_downsized: bool


@dataclass(eq=False)
class RestartDue:
    kind: ClassVar[MsgKind] = MsgKind.RESTART_DUE
    name: str


@dataclass(eq=False)
class Stop:
    kind: ClassVar[MsgKind] = MsgKind.STOP
    future: asyncio.Future[None]


Message = (
    Acquire
    | LeaseServer
    | Load
    | Unload
    | Pin
    | SetLimits
    | Release
    | Probe
    | LoadDone
    | EvictDone
    | Exited
    | ProbeFailed
    | Tick
    | Replan
    | RestartDue
    | SetMemory
    | Simulate
    | MemorySampled
    | DownsizeDone
    | Stop
)
