"""An in-memory Spawner for fast owner tests: no processes, no ports, no sleeps.

Per model name a test can make a load wait on an event (`hold`), fail (`fail`, or
`fail_if_others`: a stand-in for a load that runs out of memory until everything else
is evicted), report a device, answer probes or not, and make its eviction wait on an
event (`hold_stop`). A started backend can die (`die`). Every start, ready, failure
and stop is recorded in order in `events`, so tests can check that loads never overlap
and that victims are gone before the next load starts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from juggler.errors import LoadFailed
from juggler.manager.recipes import LaunchPlan
from juggler.manager.spawner import BackendProcess
from juggler.manager.vram import GpuUse
from juggler.types import Device


@dataclass
class Behaviour:
    start_gate: asyncio.Event | None = None
    stop_gate: asyncio.Event | None = None
    fail: BaseException | None = None
    fail_if_others: bool = False
    device: Device | None = None
    is_healthy: bool = True
    #: What a downsize frees; 0: it cannot downsize.
    downsizable_bytes: int = 1 << 20
    #: Downsizing waits on this event when set (a slow downsize).
    downsize_gate: asyncio.Event | None = None
    #: The backend refuses to downsize (a request arrived first).
    refuse_downsize: bool = False
    #: What it reports llama.cpp placed on the GPU.
    gpu: GpuUse = field(default_factory=GpuUse)


class FakeProcess:
    """A `BackendProcess` that lives in memory until stopped or told to die."""

    def __init__(
        self, spawner: FakeSpawner, name: str, pid: int, device: Device, behaviour: Behaviour
    ) -> None:
        self.spawner = spawner
        self.name = name
        self.pid: int | None = pid
        self.port = pid
        self.url = f"http://fake-{name}:{pid}"
        self.health_url = self.url + "/health"
        self.device = device
        self.load_duration_s = 0.001
        self.downsizable_bytes = behaviour.downsizable_bytes
        self.gpu = behaviour.gpu
        self.behaviour = behaviour
        #: The plan it was started with (set by `FakeSpawner.start`).
        self.plan: LaunchPlan | None = None
        #: How many times it was downsized (its contexts freed).
        self.num_downsized = 0
        self._returncode: int | None = None
        self._exited = asyncio.Event()

    @property
    def is_alive(self) -> bool:
        return self._returncode is None

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait_exit(self) -> int:
        await self._exited.wait()
        assert self._returncode is not None
        return self._returncode

    async def stop(self, grace_s: float = 5.0) -> None:
        if self.behaviour.stop_gate is not None:
            await self.behaviour.stop_gate.wait()  # a slow eviction
        if self.is_alive:
            self.spawner.events.append(("stop", self.name, self.pid or 0))
            self._end(0)

    async def downsize(self, timeout_s: float) -> bool:
        if self.behaviour.downsize_gate is not None:
            await self.behaviour.downsize_gate.wait()
        if not self.downsizable_bytes or self.behaviour.refuse_downsize or not self.is_alive:
            return False
        self.num_downsized += 1
        self.spawner.events.append(("downsized", self.name, self.pid or 0))
        return True

    def kill_now(self) -> None:
        self._end(-9)

    def die(self, code: int = -9) -> None:
        """The backend exits on its own (crash, SIGKILL)."""
        self.spawner.events.append(("died", self.name, self.pid or 0))
        self._end(code)

    def log_tail(self, max_chars: int = 2000) -> str:
        return ""

    def _end(self, code: int) -> None:
        if self._returncode is None:
            self._returncode = code
            self._exited.set()


class FakeSpawner:
    """A `Spawner` whose backends are FakeProcess objects."""

    def __init__(self) -> None:
        self.behaviour: dict[str, Behaviour] = {}
        #: (what, model name, pid) in order: start, ready, failed, stop, died.
        self.events: list[tuple[str, str, int]] = []
        self.processes: list[FakeProcess] = []
        self.num_loading = 0
        self.max_loading = 0
        self._pids = itertools.count(1000)
        #: The environment each start was given, in order.
        self.envs: list[dict[str, str]] = []

    def of(self, name: str) -> Behaviour:
        return self.behaviour.setdefault(name, Behaviour())

    def hold(self, name: str) -> asyncio.Event:
        """Loads of `name` wait until the returned event is set."""
        gate = self.of(name).start_gate = asyncio.Event()
        return gate

    def hold_stop(self, name: str) -> asyncio.Event:
        """Stopping `name` waits until the returned event is set (a slow eviction)."""
        gate = self.of(name).stop_gate = asyncio.Event()
        return gate

    def alive(self) -> list[str]:
        return sorted(p.name for p in self.processes if p.is_alive)

    def process(self, name: str) -> FakeProcess:
        """The live backend of `name`."""
        return next(p for p in self.processes if p.name == name and p.is_alive)

    def starts(self, name: str | None = None) -> int:
        return sum(1 for what, n, _ in self.events if what == "start" and name in (None, n))

    async def start(
        self,
        plan: LaunchPlan,
        log_path: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> BackendProcess:
        self.envs.append(dict(env or {}))
        name = plan.info.name
        behaviour = self.of(name)
        pid = next(self._pids)
        self.events.append(("start", name, pid))
        self.num_loading += 1
        self.max_loading = max(self.max_loading, self.num_loading)
        try:
            if behaviour.start_gate is not None:
                await behaviour.start_gate.wait()
            if behaviour.fail is not None:
                raise behaviour.fail
            if behaviour.fail_if_others and self.alive():
                raise LoadFailed(f"out of memory: {len(self.alive())} other backend(s) resident")
        except BaseException:
            self.events.append(("failed", name, pid))
            raise
        finally:
            self.num_loading -= 1
        process = FakeProcess(self, name, pid, behaviour.device or plan.device, behaviour)
        process.plan = plan
        self.processes.append(process)
        self.events.append(("ready", name, pid))
        return process

    async def probe(self, process: BackendProcess, timeout_s: float) -> bool:
        assert isinstance(process, FakeProcess)
        return process.is_alive and process.behaviour.is_healthy
