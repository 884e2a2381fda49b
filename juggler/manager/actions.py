"""What the owner task does to the table: hand out leases, take loads off the queue and
start them, evict and stop servers, drop dead ones (seed 002's memory management is
eviction_engine.py).

`Actions` runs in the owner task only (owner.py calls it from its message handlers), so
it is part of the table's single writer; its slow parts (starting and stopping
processes) run as helper tasks (tasks.py) that report back by message. The choices come
from the pure policy (policy.py); this module carries them out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from juggler.errors import SlotsPinned
from juggler.manager import messages as m
from juggler.manager import tasks
from juggler.manager.lease import Lease
from juggler.manager.load_queue import LoadJob, LoadQueue
from juggler.manager.policy import Decision, Verdict, VramState, decide
from juggler.manager.snapshot import MemState, ServerState
from juggler.manager.spawner import Spawner
from juggler.manager.table import ServerTable
from juggler.manager.vram import VramReader
from juggler.manager.wrapped import WrappedServer
from juggler.types import MODEL_TYPE_ORDER

log = logging.getLogger("juggler.manager")


def settle(
    future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
) -> bool:
    """Resolve a caller's future unless the caller gave up; True when delivered."""
    if future.done():
        return False
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
    return True


class Actions:
    def __init__(
        self,
        table: ServerTable,
        loads: LoadQueue,
        spawner: Spawner,
        load_timeout_s: float,
        post: Callable[[m.Message], None],
        env_for: Callable[[WrappedServer], Mapping[str, str]] = lambda server: {},
        vram: VramReader | None = None,
    ) -> None:
        self.table = table
        #: The GPU's free memory and each backend's share (None: no GPU).
        self.vram = vram
        #: The environment a new backend gets (its compute board).
        self.env_for = env_for
        self.loads = loads
        self.spawner = spawner
        self.load_timeout_s = load_timeout_s
        self.post = post
        #: Per evicting server: done when its process is gone.
        self.stopped: dict[int, asyncio.Future[None]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a helper task (kept until it ends; cancelled at shutdown)."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- leases --------------------------------------------------------------------------
    def lease(self, server: WrappedServer, future: asyncio.Future[Any]) -> None:
        """Count one request in flight and hand out its lease (atomic in this task)."""
        lease = Lease(
            server_id=server.server_id,
            info=server.plan.info,
            backend_url=server.backend_url,
            pid=server.pid,
            device=server.device,
            on_release=lambda server_id: self.post(m.Release(server_id)),
        )
        if settle(future, lease):
            server.in_flight += 1
            self.table.touch(server)  # a request's start is a use (seed 000)
            if server.memory is not MemState.ACTIVE:
                # Seed 002: "The next request transparently restores it": the backend
                # brings its contexts back itself; the request is served at once.
                server.memory = MemState.ACTIVE
                self.table.counters["restores"] += 1

    # -- loads ---------------------------------------------------------------------------
    def pump(self, limits: tuple[int, ...]) -> None:
        """Take loads off the queue while none runs; the decision for a load is made
        here, when it leaves the queue (seed 000)."""
        by_type = dict(zip(MODEL_TYPE_ORDER, limits, strict=True))
        while (job := self.loads.head()) is not None:
            request = job.request()
            state, per_pid = self._vram(request.vram_bytes)
            decision = decide(
                request,
                self.table.views(per_pid=per_pid),
                by_type,
                self.table.views(ServerState.EVICTING, per_pid),
                state,
            )
            if job.is_restart and decision.victims:
                # A restart never evicts: its slot was taken meanwhile, the newer choice wins.
                log.info("manager: not restarting %s: its slot is taken", job.model_name)
                self.loads.pop_head()
                continue
            if decision.verdict is Verdict.WAIT:
                # Decided again when a request finishes or an eviction ends.
                log.debug("manager: %s waits for %s", job.model_name, decision.waiting_for)
                return
            self.loads.pop_head()
            if decision.verdict is Verdict.REFUSE:
                self.fail(job, SlotsPinned(decision.reason))
            elif decision.verdict is Verdict.NOOP:
                self._noop(job)
            else:
                self._start_load(job, decision)

    def _vram(self, need: int) -> tuple[VramState | None, dict[int, int]]:
        """The GPU's free memory and VRAM per pid, read now for a load that needs the
        GPU (an NVML call or two: a few milliseconds in this task, once per GPU load
        leaving the queue); (None, {}) for any other load or without a GPU."""
        if need <= 0 or self.vram is None or not self.vram.has_gpu:
            return None, {}
        sample, per_pid = self.vram.read()
        if sample is None:
            return None, per_pid
        return VramState(max(0, sample.total_bytes - sample.used_bytes)), per_pid

    def fail(self, job: LoadJob, error: BaseException) -> None:
        for future in job.acquirers:
            settle(future, error=error)
        for loader in job.loaders:
            settle(loader, error=error)

    def serve(self, job: LoadJob, server: WrappedServer) -> None:
        """Answer a job's callers from a ready server: requests get leases, /load a
        snapshot."""
        for future in job.acquirers:
            self.lease(server, future)
        for loader in job.loaders:
            settle(loader, server.snapshot())

    def _noop(self, job: LoadJob) -> None:
        server = self.table.ready(job.model_name)
        assert server is not None
        self.table.touch(server)
        if job.is_explicit:
            if job.pin is not None:
                server.pinned = job.pin
            # The same launch: an automatic ctx_size keeps the size the process holds.
            server.options = job.plan.options.model_copy(
                update={"ctx_size": server.options.ctx_size}
            )
        self.serve(job, server)

    def _start_load(self, job: LoadJob, decision: Decision) -> None:
        by_name = self.table.ready_by_name()
        stopping = [self.evict(by_name[name]) for name in decision.victims]
        server = self.table.add(job.plan, pinned=bool(job.pin))
        self.loads.active = job
        if decision.victims:
            log.info("manager: evicting %s to load %s", ", ".join(decision.victims), job.model_name)
        load = tasks.load(
            self.spawner,
            job,
            server.server_id,
            server.log_path,
            stopping,
            self.load_timeout_s,
            self.post,
            self.env_for(server),
        )
        self.spawn(load)

    # -- evictions -----------------------------------------------------------------------
    def evict(self, server: WrappedServer) -> asyncio.Future[None]:
        """Mark `server` evicting; its process stops once its requests are done. Returns a
        future done when the process is gone."""
        if server.state is not ServerState.EVICTING:
            server.state = ServerState.EVICTING
            self.stopped[server.server_id] = asyncio.get_running_loop().create_future()
            if server.in_flight == 0:
                self.stop(server)
        return self.stopped[server.server_id]

    def stop(self, server: WrappedServer) -> None:
        """Start stopping an evicting server's process now (EvictDone follows)."""
        if not server.is_stopping and server.process is not None:
            server.is_stopping = True
            self.spawn(tasks.stop(server.process, server.stop_grace_s, server.server_id, self.post))

    def drop_dead(self, server: WrappedServer) -> None:
        """A ready backend's process exited on its own: free its slot at once."""
        code = server.process.returncode if server.process is not None else None
        log.warning(
            "manager: backend for %s (pid %s) exited with code %s; slot freed",
            server.model_name,
            server.pid,
            code,
        )
        server.state = ServerState.DEAD
        self.table.counters["backend_deaths"] += 1
        self.table.remove(server.server_id)
        if server.process is not None:
            server.process.kill_now()  # what is left of its process group
