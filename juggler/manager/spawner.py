"""The seam between the owner task and backend processes.

A `Spawner` starts a backend for a LaunchPlan and returns a `BackendProcess` handle; the
owner stores the handle in its WrappedServer record and runs the handle's slow calls
(`wait_exit`, `stop`) in helper tasks. Production uses `ProcessSpawner` (process.py:
child processes, health polling); fast tests use an in-memory fake
(tests/manager/fake_spawner.py). Neither writes the owner's records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from juggler.manager.recipes import LaunchPlan
from juggler.manager.vram import GpuUse
from juggler.types import Device

#: SIGTERM -> SIGKILL grace on eviction.
STOP_GRACE_S = 5.0


class BackendProcess(Protocol):
    """A started, healthy backend. Its fields are fixed once `Spawner.start` returns."""

    #: Base URL, e.g. http://127.0.0.1:41234.
    url: str
    #: Where `Spawner.probe` asks whether it is healthy.
    health_url: str
    port: int
    pid: int | None
    #: What the backend reports it uses (llamacpp: cpu or gpu), else the recipe's device.
    device: Device
    #: From spawn to its first healthy answer.
    load_duration_s: float
    #: What a downsize frees (its KV cache and compute buffers, as it reported them when
    #: it became healthy); 0 for a backend that cannot downsize.
    downsizable_bytes: int
    #: What llama.cpp placed on the GPU, as it reported it when it became healthy.
    gpu: GpuUse

    @property
    def is_alive(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait_exit(self) -> int:
        """Blocks until the process exits; returns its exit code."""
        ...

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask it to stop, force it after `grace_s`; returns once it is gone. Safe to
        call twice or after it exited."""
        ...

    async def downsize(self, timeout_s: float) -> bool:
        """Ask it to free its contexts and keep its weights (seed 002's soft idle); its
        next request restores them. True when it did; False when it cannot or would not
        (a request arrived meanwhile). Never raises for a backend that said no."""
        ...

    def kill_now(self) -> None:
        """Synchronous: force what is left of it (its process group) to end now."""
        ...

    def log_tail(self, max_chars: int = 2000) -> str:
        """The end of its output, to explain a failure."""
        ...


class Spawner(Protocol):
    async def start(
        self,
        plan: LaunchPlan,
        log_path: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> BackendProcess:
        """Start a backend for `plan` (with `env` added to its environment), logging to
        `log_path`, and wait up to `timeout_s` for it to be healthy. Raises CheckpointMissing / RecipeNotInstalled (missing-file
        class) or LoadFailed; on failure or cancellation nothing is left running."""
        ...

    async def probe(self, process: BackendProcess, timeout_s: float) -> bool:
        """Whether a started backend still answers its health check within `timeout_s`."""
        ...
