"""The owner task: the only code that reads or writes the residency table.

It holds the WrappedServers (by id), the load queue and the slot limits, and runs
`run()` as one asyncio task. Everything else talks to it through `post(message)`.
Process I/O (start, health polling, stop) runs in helper tasks that report back by
message, so the owner never blocks and releases are handled while a load waits.

Main loop, per message: (1) dispatch it by kind, (2) take queued loads off the queue
while none is running (`_pump`: ask the pure policy, carry its decision out), (3) publish
an immutable snapshot of the table for readers. Step (3), for servers loaded with
`auto_evict`, unloads those idle past their `evict_idle_timeout` and arms a timer for the
next one.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from juggler.config import Settings
from juggler.errors import CheckpointMissing, LoadFailed, ModelNotLoaded, SlotsPinned
from juggler.manager import helpers
from juggler.manager import messages as m
from juggler.manager.lease import Lease
from juggler.manager.policy import (
    Decision,
    LoadRequest,
    ServerView,
    Verdict,
    decide,
    idle_victims,
)
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.manager.wrapped import WrappedServer
from juggler.types import MODEL_TYPE_ORDER, ModelType

log = logging.getLogger("juggler.manager")


def _settle(
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


class Owner:
    def __init__(
        self, settings: Settings, log_dir: Path, post: Callable[[m.Message], None]
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.post = post
        self.inbox: asyncio.Queue[m.Message] = asyncio.Queue()
        self.limits: dict[ModelType, int] = dict(
            zip(MODEL_TYPE_ORDER, settings.max_loaded_models, strict=True)
        )
        self.servers: dict[int, WrappedServer] = {}
        self.queue: collections.deque[m.LoadJob] = collections.deque()
        self.active: m.LoadJob | None = None
        self.published: tuple[ServerSnapshot, ...] = ()
        self.most_recent: ServerSnapshot | None = None
        self.counters: collections.Counter[str] = collections.Counter()
        self._next_id = 0
        self._stamp = 0.0
        self._loads_by_name: collections.Counter[str] = collections.Counter()
        self._stopped: dict[int, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handlers: dict[m.MsgKind, Callable[[Any], None]] = {
            m.MsgKind.ACQUIRE: self.on_acquire,
            m.MsgKind.LOAD: self.on_load,
            m.MsgKind.UNLOAD: self.on_unload,
            m.MsgKind.PIN: self.on_pin,
            m.MsgKind.SET_LIMITS: self.on_set_limits,
            m.MsgKind.RELEASE: self.on_release,
            m.MsgKind.PROBE: self.on_probe,
            m.MsgKind.LOAD_DONE: self.on_load_done,
            m.MsgKind.EVICT_DONE: self.on_evict_done,
            m.MsgKind.EXITED: self.on_exited,
            m.MsgKind.PROBE_FAILED: self.on_probe_failed,
            m.MsgKind.TICK: self.on_tick,
        }
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # -- main loop ---------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            msg = await self.inbox.get()
            if isinstance(msg, m.Stop):
                await self._shutdown(msg)
                return
            handler = self._handlers.get(msg.kind)
            try:
                if handler is None:  # 1. dispatch
                    log.error("manager: unknown message %r", msg)
                else:
                    handler(msg)
                self._pump()  # 2. start the next load if none runs
                self._arm_idle_timer()  # 3. opt-in idle eviction (seed 002)
            except Exception:
                log.exception("manager: handling %s failed", msg.kind.name)
            self._publish()  # 4. readers see the new table

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _touch(self, server: WrappedServer) -> None:
        # Strictly increasing, so LRU order is exact even within one clock tick.
        self._stamp = max(time.time(), self._stamp + 1e-6)
        server.last_use = self._stamp

    def _ready(self, name: str) -> WrappedServer | None:
        return next(
            (
                s
                for s in self.servers.values()
                if s.model_name == name and s.state is ServerState.READY
            ),
            None,
        )

    def _lease(self, server: WrappedServer, future: asyncio.Future[Lease | None]) -> None:
        """Count one request in flight and hand out its lease (atomic in this task)."""
        lease = Lease(
            server_id=server.server_id,
            info=server.plan.info,
            backend_url=server.backend_url,
            pid=server.pid,
            device=server.device,
            on_release=self._release_from_lease,
        )
        if _settle(future, lease):
            server.in_flight += 1
            self._touch(server)

    def _release_from_lease(self, server_id: int) -> None:
        self.post(m.Release(server_id))

    def _publish(self) -> None:
        self.published = tuple(s.snapshot() for s in self.servers.values())
        ready = [s for s in self.servers.values() if s.state is ServerState.READY]
        # Ids grow with each load and loads are serialized: the highest is the newest.
        self.most_recent = max(ready, key=lambda s: s.server_id).snapshot() if ready else None

    # -- caller messages ---------------------------------------------------------------
    def _find_job(self, name: str) -> m.LoadJob | None:
        if self.active is not None and self.active.model_name == name:
            return self.active
        return next((j for j in self.queue if j.model_name == name), None)

    def on_acquire(self, msg: m.Acquire) -> None:
        server = self._ready(msg.name)
        if server is not None:
            self._lease(server, msg.future)
            return
        job = self._find_job(msg.name)
        if job is not None:
            job.acquirers.append(msg.future)
        elif msg.plan is None:
            _settle(msg.future, None)  # the caller prepares a plan and asks again
        else:
            self.queue.append(m.LoadJob(msg.plan, is_explicit=False, acquirers=[msg.future]))

    def on_load(self, msg: m.Load) -> None:
        key = msg.plan.options.launch_key()
        for job in ([self.active] if self.active else []) + list(self.queue):
            if job.model_name != msg.plan.info.name:
                continue
            if job is not self.active and not job.is_explicit:
                job.plan, job.is_explicit = msg.plan, True  # an auto-load takes these options
            if job.plan.options.launch_key() == key:
                job.pin = msg.pin if msg.pin is not None else job.pin
                job.loaders.append(msg.future)
                return
        self.queue.append(m.LoadJob(msg.plan, is_explicit=True, pin=msg.pin, loaders=[msg.future]))

    def on_unload(self, msg: m.Unload) -> None:
        targets = [
            s
            for s in self.servers.values()
            if s.state is ServerState.READY and (msg.name is None or s.model_name == msg.name)
        ]
        if msg.name is not None and not targets:
            _settle(msg.future, error=ModelNotLoaded(f"Model not loaded: {msg.name}"))
            return
        _settle(msg.future, [(s.model_name, self._evict(s)) for s in targets])

    def on_pin(self, msg: m.Pin) -> None:
        server = self._ready(msg.name)
        if server is None:
            _settle(msg.future, error=ModelNotLoaded(f"Model not loaded: {msg.name}"))
            return
        server.pinned = msg.pinned
        _settle(msg.future, server.snapshot())

    def on_set_limits(self, msg: m.SetLimits) -> None:
        # Applied lazily: a lowered limit evicts down to it at that type's next load.
        self.limits = dict(zip(MODEL_TYPE_ORDER, msg.limits, strict=True))
        _settle(msg.future)

    def on_release(self, msg: m.Release) -> None:
        server = self.servers.get(msg.server_id)
        if server is None:
            return  # it died or was stopped meanwhile
        server.in_flight = max(0, server.in_flight - 1)
        self._touch(server)
        if server.state is ServerState.EVICTING and server.in_flight == 0:
            self._stop(server)  # a drained unload

    def on_probe(self, msg: m.Probe) -> None:
        server = self.servers.get(msg.server_id)
        if server is None or server.state is not ServerState.READY:
            if msg.future is not None:
                _settle(msg.future)
            return
        if not server.is_alive:
            code = server.process.returncode if server.process is not None else None
            self.on_exited(m.Exited(server.server_id, -1 if code is None else code))
            if msg.future is not None:
                _settle(msg.future)
            return
        self._spawn(helpers.probe(server, self.post, msg.future))

    def on_tick(self, msg: m.Tick) -> None:
        self._timer = self._timer_at = None  # _arm_idle_timer runs next and evicts

    def _arm_idle_timer(self) -> None:
        victims, next_at = idle_victims(self.views(), time.time())
        by_name = {s.model_name: s for s in self.servers.values() if s.state is ServerState.READY}
        for name in victims:
            log.info("manager: %s idle past its evict_idle_timeout; unloading", name)
            self.counters["idle_evictions"] += 1
            self._evict(by_name[name])
        if next_at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, next_at
        if next_at is not None:
            delay = max(0.0, next_at - time.time()) + 0.01
            self._timer = asyncio.get_running_loop().call_later(delay, self.post, m.Tick())

    # -- helper-task messages ----------------------------------------------------------
    def on_load_done(self, msg: m.LoadDone) -> None:
        self.active = None
        server = self.servers[msg.server_id]
        job = msg.job
        if msg.error is None:
            server.state = ServerState.READY
            self._touch(server)  # ... and its completion (seed 000)
            if job.pin is not None:
                server.pinned = job.pin
            self.counters["loads"] += 1
            self._spawn(helpers.watch(server, self.post))
            for future in job.acquirers:
                self._lease(server, future)
            for loader in job.loaders:
                _settle(loader, server.snapshot())
            return
        server.state = ServerState.FAILED
        del self.servers[msg.server_id]
        self.counters["load_failures"] += 1
        others = [s for s in self.servers.values() if s.state is ServerState.READY]
        if isinstance(msg.error, CheckpointMissing) or job.has_retried or not others:
            log.warning("manager: load of %s failed: %s", job.model_name, msg.error)
            self._fail(job, msg.error)
            return
        log.warning(
            "manager: load of %s failed (%s); evicting all and retrying once",
            job.model_name,
            msg.error,
        )
        job.has_retried = job.evict_all = True
        self.queue.appendleft(job)

    def on_evict_done(self, msg: m.EvictDone) -> None:
        server = self.servers.pop(msg.server_id, None)
        if server is not None:
            server.state = ServerState.STOPPED
            self.counters["evictions"] += 1
        stopped = self._stopped.pop(msg.server_id, None)
        if stopped is not None:
            _settle(stopped)

    def on_exited(self, msg: m.Exited) -> None:
        server = self.servers.get(msg.server_id)
        if server is None or server.state is not ServerState.READY:
            return  # an eviction or a load is handling this process
        log.warning(
            "manager: backend for %s (pid %s) exited with code %s; slot freed",
            server.model_name,
            server.pid,
            msg.returncode,
        )
        server.state = ServerState.DEAD
        self.counters["backend_deaths"] += 1
        del self.servers[msg.server_id]
        self._spawn(server.stop(grace_s=0.5))  # reap leftovers of its process group

    def on_probe_failed(self, msg: m.ProbeFailed) -> None:
        server = self.servers.get(msg.server_id)
        if server is not None and server.state is ServerState.READY:
            log.warning("manager: backend for %s does not answer; stopping it", server.model_name)
            server.stop_grace_s = 0.5
            self._evict(server)
            self._stop(server)  # now: its requests in flight have failed already
        if msg.future is not None:
            _settle(msg.future)

    # -- loads and evictions -----------------------------------------------------------
    def _fail(self, job: m.LoadJob, error: BaseException) -> None:
        for future in job.acquirers:
            _settle(future, error=error)
        for loader in job.loaders:
            _settle(loader, error=error)

    def _request(self, job: m.LoadJob) -> LoadRequest:
        plan = job.plan
        return LoadRequest(
            plan.info.name,
            plan.model_type,
            plan.device,
            plan.npu_backend,
            plan.options.launch_key() if job.is_explicit else None,
            job.evict_all,
        )

    def views(self) -> list[ServerView]:
        return [
            ServerView(
                s.model_name,
                s.type,
                s.device,
                s.last_use,
                s.plan.npu_backend,
                s.in_flight,
                s.pinned,
                s.options.launch_key(),
                s.options.auto_evict,
                s.options.evict_idle_timeout,
                s.load_duration_s or 0.0,
                s.options.evict_weight_factor,
            )
            for s in self.servers.values()
            if s.state is ServerState.READY
        ]

    def _pump(self) -> None:
        """Take loads off the queue while none runs and no eviction is under way; the
        decision for a load is made here, when it leaves the queue (seed 000)."""
        while (
            self.active is None
            and self.queue
            and not any(s.state is ServerState.EVICTING for s in self.servers.values())
        ):
            job = self.queue[0]
            decision = decide(self._request(job), self.views(), self.limits)
            if decision.verdict is Verdict.WAIT:
                return  # decided again when a request finishes
            self.queue.popleft()
            if decision.verdict is Verdict.REFUSE:
                self._fail(job, SlotsPinned(decision.reason))
            elif decision.verdict is Verdict.NOOP:
                self._noop(job)
            else:
                self._start_load(job, decision)

    def _noop(self, job: m.LoadJob) -> None:
        server = self._ready(job.model_name)
        assert server is not None
        self._touch(server)
        if job.is_explicit:
            if job.pin is not None:
                server.pinned = job.pin
            server.options = job.plan.options
        for future in job.acquirers:
            self._lease(server, future)
        for loader in job.loaders:
            _settle(loader, server.snapshot())

    def _start_load(self, job: m.LoadJob, decision: Decision) -> None:
        by_name = {s.model_name: s for s in self.servers.values() if s.state is ServerState.READY}
        stopping = [self._evict(by_name[name]) for name in decision.victims]
        self._next_id += 1
        self._loads_by_name[job.model_name] += 1
        server = WrappedServer(
            self._next_id, job.plan, self.log_dir, self._loads_by_name[job.model_name]
        )
        server.pinned = bool(job.pin)
        self._touch(server)  # a load's start is a use (seed 000)
        self.servers[server.server_id] = server
        self.active = job
        if decision.victims:
            log.info("manager: evicting %s to load %s", ", ".join(decision.victims), job.model_name)
        self._spawn(helpers.load(job, server, stopping, self.settings.load_timeout_s, self.post))

    def _evict(self, server: WrappedServer) -> asyncio.Future[None]:
        """Mark `server` evicting; its process stops once its requests are done. Returns a
        future done when the process is gone."""
        if server.state is not ServerState.EVICTING:
            server.state = ServerState.EVICTING
            self._stopped[server.server_id] = asyncio.get_running_loop().create_future()
            if server.in_flight == 0:
                self._stop(server)
        return self._stopped[server.server_id]

    def _stop(self, server: WrappedServer) -> None:
        if not server.is_stopping:
            server.is_stopping = True
            self._spawn(helpers.stop_server(server, self.post))

    async def _shutdown(self, msg: m.Stop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        error = LoadFailed("The server is shutting down")
        for job in [*([self.active] if self.active else []), *self.queue]:
            self._fail(job, error)
        self.queue.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(s.stop(grace_s=2.0) for s in self.servers.values()), return_exceptions=True
        )
        for server in self.servers.values():
            server.state = ServerState.STOPPED
        for stopped in self._stopped.values():
            _settle(stopped)
        self.servers.clear()
        self._publish()
        _settle(msg.future)
