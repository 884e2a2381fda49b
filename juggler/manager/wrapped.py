"""One WrappedServer: the owner's record of one backend: its model, type, device, pin,
last use, requests in flight, lifecycle state and, once started, its process handle.

Only the owner task creates these records and writes their fields (through the server
table, table.py). The process I/O happens elsewhere: a Spawner starts the backend and
returns a handle, which the owner stores here when the load is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from juggler.compute.plan import Share
from juggler.manager.policy import ServerView
from juggler.manager.pressure import MemoryView
from juggler.manager.recipes import LaunchPlan
from juggler.manager.snapshot import MemState, ServerSnapshot, ServerState
from juggler.manager.spawner import STOP_GRACE_S, BackendProcess
from juggler.manager.vram import GpuUse, held_bytes


class WrappedServer:
    """A backend for one model, as the owner task keeps it. Written by the owner only."""

    def __init__(
        self, server_id: int, plan: LaunchPlan, log_dir: Path, num_loads: int, last_use: float
    ) -> None:
        self.server_id = server_id
        self.plan = plan
        self.model_name = plan.info.name
        self.type = plan.model_type
        self.device = plan.device
        self.options = plan.options
        self.pinned = False
        self.state = ServerState.LOADING
        self.last_use = last_use
        self.in_flight = 0
        self.num_loads = num_loads
        #: The started backend; None while it loads.
        self.process: BackendProcess | None = None
        #: SIGTERM -> SIGKILL grace on eviction; short for a backend that stopped answering.
        self.stop_grace_s = STOP_GRACE_S
        #: Set once the owner started the task that stops this process.
        self.is_stopping = False
        #: When it became ready (`last_use` clock); None while it loads.
        self.ready_at: float | None = None
        #: Stopped because it stopped answering: the watchdog restarts it once it is gone.
        self.is_hung = False
        #: Seed 002's soft idle (see MemState).
        self.memory = MemState.ACTIVE
        #: Its share of the cores now (the compute planner writes it); None: outside the plan.
        self.compute: Share | None = None
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model_name)
        self.log_path = log_dir / f"{safe}-{server_id}.log"
        self._launch: tuple[LaunchPlan, str, tuple[str, ...]] | None = None

    @property
    def backend_url(self) -> str:
        return self.process.url if self.process is not None else ""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def is_alive(self) -> bool:
        return self.process is not None and self.process.is_alive

    @property
    def gpu(self) -> GpuUse:
        """What llama.cpp placed on the GPU (nothing while it loads)."""
        return self.process.gpu if self.process is not None else GpuUse()

    @property
    def is_fully_offloaded(self) -> bool:
        """Every layer on the GPU: as llama.cpp reported, or as planned while it loads."""
        if self.process is not None:
            return self.gpu.is_full
        return self.plan.offload is not None and self.plan.offload.is_full

    def vram_bytes(self, per_pid: Mapping[int, int] | None = None) -> int:
        """What it holds on the GPU (`vram.held_bytes`; NVML's figure when `per_pid` has
        its pid); a loading server counts what its plan expects."""
        if self.process is None:
            return self.plan.vram_bytes
        return held_bytes(self.gpu, self.pid, per_pid or {})

    def snapshot(self) -> ServerSnapshot:
        return ServerSnapshot(
            server_id=self.server_id,
            model_name=self.model_name,
            checkpoint=self.plan.info.checkpoint,
            type=self.type,
            device=self.device,
            recipe=self.plan.recipe.name,
            backend_url=self.backend_url,
            pid=self.pid,
            last_use=self.last_use,
            pinned=self.pinned,
            status=self.state,
            in_flight=self.in_flight,
            options=self.options,
            num_loads=self.num_loads,
            load_duration_s=self.process.load_duration_s if self.process else None,
            memory_state=self.memory,
            downsizable_bytes=self.process.downsizable_bytes if self.process else 0,
            auto_evict=self.options.auto_evict,
            launch_command=self.launch_command(),
            compute=self.compute,
            gpu=self.gpu,
        )

    def launch_command(self) -> tuple[str, ...]:
        """The command line the backend was started with (empty while it starts). Kept
        for its plan and URL: every snapshot shows it, and the owner publishes one after
        each message, two a request (issue 47)."""
        plan, url = self.plan, self.backend_url
        kept = self._launch
        if kept is not None and kept[0] is plan and kept[1] == url:
            return kept[2]
        port = urlsplit(url).port if url else None
        command = tuple(plan.argv(port)) if port else ()
        self._launch = (plan, url, command)
        return command

    def memory_view(self, global_auto_evict: bool) -> MemoryView:
        """This server as seed 002's memory policy sees it."""
        opts = self.options
        return MemoryView(
            self.model_name,
            self.last_use,
            load_duration_s=self.process.load_duration_s if self.process else 0.0,
            evict_weight_factor=opts.evict_weight_factor,
            pinned=self.pinned,
            in_flight=self.in_flight,
            opted_in=global_auto_evict or opts.auto_evict,
            is_downsized=self.memory is not MemState.ACTIVE,
            downsizable_bytes=self.process.downsizable_bytes if self.process else 0,
            vram_bytes=self.vram_bytes(),
            downsizable_vram_bytes=self.gpu.downsizable_vram_bytes,
            downsize_idle_timeout_s=opts.downsize_idle_timeout,
            evict_idle_timeout_s=opts.evict_idle_timeout,
        )

    def view(self, per_pid: Mapping[int, int] | None = None) -> ServerView:
        """This server as the policy sees it (`per_pid`: NVML's VRAM per process)."""
        return ServerView(
            self.model_name,
            self.type,
            self.device,
            self.last_use,
            self.plan.npu_backend,
            self.in_flight,
            self.pinned,
            self.plan.launch_key(),
            self.vram_bytes(per_pid),
        )
