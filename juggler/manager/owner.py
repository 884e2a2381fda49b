"""The owner task: the single writer of the residency table.

It holds the server table (table.py), the load queue (load_queue.py) and the slot
limits, and runs `run()` as one asyncio task. Everything else talks to it through its
inbox: callers (manager.py) post typed messages carrying a Future; helper tasks
(tasks.py) do the process I/O through the Spawner and post their outcome back, so the
owner never blocks and releases are handled while a load runs. The handlers below read
a message and update the table; `Actions` (actions.py) carries out leases, loads and
evictions in this same task, as the pure policy (policy.py) decides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from juggler.errors import LoadFailed, ModelNotLoaded
from juggler.manager import messages as m
from juggler.manager import tasks
from juggler.manager.actions import Actions, settle
from juggler.manager.compute import ComputePlanner
from juggler.manager.eviction_engine import EvictionEngine
from juggler.manager.load_queue import LoadJob, LoadQueue
from juggler.manager.monitor import Monitor
from juggler.manager.policy import retry_after_failure
from juggler.manager.snapshot import ServerState, TableSnapshot
from juggler.manager.spawner import Spawner
from juggler.manager.table import ServerTable
from juggler.manager.vram import VramReader
from juggler.manager.watchdog import Watchdog
from juggler.manager.wrapped import WrappedServer

log = logging.getLogger("juggler.manager")


class Owner:
    def __init__(
        self,
        *,
        table: ServerTable,
        spawner: Spawner,
        limits: tuple[int, ...],
        load_timeout_s: float,
        inbox: asyncio.Queue[m.Message],
        post: Callable[[m.Message], None],
        publish: Callable[[TableSnapshot], None],
        monitor: Monitor,
        auto_evict: bool = False,
        threshold: float = 0.9,
        compute: ComputePlanner | None = None,
        vram: VramReader | None = None,
    ) -> None:
        """`post` puts a message in `inbox` from any thread (leases may be released off
        the loop); `publish` receives the snapshot after every message."""
        self.table = table
        self.spawner = spawner
        self.limits = limits
        self.inbox = inbox
        self.publish = publish
        self.loads = LoadQueue()
        #: The one owner of the machine's cores: shares for the busy backends.
        self.compute = compute or ComputePlanner(enabled=False)
        self.act = Actions(
            table,
            self.loads,
            spawner,
            load_timeout_s,
            post,
            env_for=self.compute.env_for,
            vram=vram,
        )
        self.watchdog = Watchdog(post, table.counters)
        self.engine = EvictionEngine(
            table, self.act, monitor, auto_evict=auto_evict, threshold=threshold
        )
        self._handlers: dict[m.MsgKind, Callable[[Any], None]] = {
            m.MsgKind.ACQUIRE: self.on_acquire,
            m.MsgKind.LEASE: self.on_lease,
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
            m.MsgKind.REPLAN: lambda msg: None,  # step 4 replans after every message
            m.MsgKind.RESTART_DUE: self.on_restart_due,
            m.MsgKind.SET_MEMORY: self.engine.on_set,
            m.MsgKind.SIMULATE: self.engine.on_simulate,
            m.MsgKind.MEMORY_SAMPLED: lambda msg: self.engine.on_sample(msg.sample, msg.memory),
            m.MsgKind.DOWNSIZE_DONE: self.engine.on_downsize_done,
        }

    async def run(self) -> None:
        """Handle messages until Stop. Each message: (1) dispatch it by kind, (2) take
        queued loads off the queue while none runs, deciding each as it leaves (seed 000),
        (3) seed 002's idle timeouts (downsize, evict), the timer for the next one, and the
        memory monitor on exactly while a model is opted in, (4) the compute plan: each
        busy backend's share of the cores, written to its board before a lease handed out
        in (1) reaches its caller, (5) publish an immutable snapshot for readers."""
        self._publish()
        while True:
            msg = await self.inbox.get()
            if isinstance(msg, m.Stop):
                await self._shutdown(msg)
                return
            handler = self._handlers.get(msg.kind)
            try:
                if handler is None:  # 1.
                    log.error("manager: unknown message %r", msg)
                else:
                    handler(msg)
                self.act.pump(self.limits)  # 2.
                self.engine.after_message()  # 3.
                self.compute.update(self.table)  # 4.
            except Exception:
                log.exception("manager: handling %s failed", msg.kind.name)
            self._publish()  # 5.

    def _publish(self) -> None:
        self.publish(
            self.table.snapshot(self.limits, len(self.loads), self.watchdog, self.engine.status())
        )

    # -- caller messages ---------------------------------------------------------------
    def on_acquire(self, msg: m.Acquire) -> None:
        server = self.table.ready(msg.name)
        if server is not None:
            self.act.lease(server, msg.future)
        elif self.loads.add_acquirer(msg.name, msg.future):
            pass  # joined the load already queued or running
        elif (restart := self.watchdog.claim(msg.name)) is not None:
            # The watchdog was about to restart it: load it now for this request, with the
            # options and the pin it had (as an auto-load, which may take a slot).
            job = LoadJob(restart.plan, is_explicit=False, pin=restart.pinned or None)
            job.acquirers.append(msg.future)
            self.loads.append(job)
        elif msg.plan is None:
            settle(msg.future, None)  # the caller prepares a plan and asks again
        else:
            self.loads.append(LoadJob(msg.plan, is_explicit=False, acquirers=[msg.future]))

    def on_lease(self, msg: m.LeaseServer) -> None:
        server = self.table.get(msg.server_id)
        if server is not None and server.state is ServerState.READY and not server.is_alive:
            self._on_dead(server)
        if server is None or server.state is not ServerState.READY:
            name = server.model_name if server else f"server {msg.server_id} is gone"
            settle(msg.future, error=ModelNotLoaded(f"Model not loaded: {name}"))
            return
        self.act.lease(server, msg.future)

    def on_load(self, msg: m.Load) -> None:
        self.watchdog.cancel(msg.plan.info.name)  # the user's load replaces a restart
        self.loads.add_loader(msg.plan, msg.pin, msg.future)

    def on_unload(self, msg: m.Unload) -> None:
        targets = [
            s
            for s in self.table.in_state(ServerState.READY)
            if msg.name is None or s.model_name == msg.name
        ]
        pending = [n for n in self.watchdog.pending if msg.name in (None, n)]
        for name in pending:
            self.watchdog.cancel(name)  # unloading a model also means "do not restart it"
        if msg.name is not None and not targets and not pending:
            settle(msg.future, error=ModelNotLoaded(f"Model not loaded: {msg.name}"))
            return
        settle(msg.future, [(s.model_name, self.act.evict(s)) for s in targets])

    def on_pin(self, msg: m.Pin) -> None:
        server = self.table.ready(msg.name)
        if server is None:
            settle(msg.future, error=ModelNotLoaded(f"Model not loaded: {msg.name}"))
            return
        server.pinned = msg.pinned
        settle(msg.future, server.snapshot())

    def on_set_limits(self, msg: m.SetLimits) -> None:
        # Applied lazily: a lowered limit evicts down to it at that type's next load.
        self.limits = msg.limits
        settle(msg.future)

    def on_release(self, msg: m.Release) -> None:
        server = self.table.get(msg.server_id)
        if server is None:
            return  # it died or was stopped meanwhile
        server.in_flight = max(0, server.in_flight - 1)
        self.table.touch(server)  # a request's completion is a use (seed 000)
        if server.state is ServerState.EVICTING and server.in_flight == 0:
            self.act.stop(server)  # a drained unload

    def on_probe(self, msg: m.Probe) -> None:
        server = self.table.get(msg.server_id)
        if server is not None and server.state is ServerState.READY:
            if server.process is not None and server.is_alive:
                probe = tasks.probe(
                    self.spawner, server.process, server.server_id, self.act.post, msg.future
                )
                self.act.spawn(probe)
                return  # the probe task, or on_probe_failed, settles the future
            self._on_dead(server)
        if msg.future is not None:
            settle(msg.future)

    def on_tick(self, msg: m.Tick) -> None:
        self.engine.on_timer()  # step 3 runs next and acts

    def on_restart_due(self, msg: m.RestartDue) -> None:
        restart = self.watchdog.take(msg.name)
        if restart is None or self.table.ready(msg.name) or self.loads.find(msg.name):
            return  # cancelled, or the model is back some other way
        log.info("manager: restarting %s (attempt %d)", msg.name, restart.attempt + 1)
        job = LoadJob(
            restart.plan, is_explicit=True, pin=restart.pinned, restart_attempt=restart.attempt
        )
        self.loads.append(job)

    # -- the watchdog ------------------------------------------------------------------
    def _on_dead(self, server: WrappedServer) -> None:
        """A ready backend died on its own: free its slot now, restart it later."""
        self.act.drop_dead(server)
        self._restart_later(server)

    def _restart_later(self, server: WrappedServer) -> None:
        now = self.table.clock()
        up_s = now - server.ready_at if server.ready_at is not None else None
        self.watchdog.on_death(server.plan, server.pinned, now, up_s)

    # -- helper-task messages ----------------------------------------------------------
    def on_load_done(self, msg: m.LoadDone) -> None:
        self.loads.active = None
        job = msg.job
        if msg.process is not None:
            server = self.table.get(msg.server_id)
            assert server is not None  # a loading server leaves the table only below
            server.process = msg.process
            server.device = msg.process.device
            server.state = ServerState.READY
            self.table.touch(server)  # a load's completion is a use (seed 000)
            server.ready_at = server.last_use
            if job.is_restart:
                self.table.counters["backend_restarts"] += 1
            if job.pin is not None:
                server.pinned = job.pin
            self.table.counters["loads"] += 1
            self.act.spawn(tasks.watch(msg.process, server.server_id, self.act.post))
            self.act.serve(job, server)
            return
        error = msg.error or LoadFailed(f"Loading {job.model_name!r} failed")
        failed = self.table.remove(msg.server_id)
        if failed is not None:
            failed.state = ServerState.FAILED
        self.table.counters["load_failures"] += 1
        if job.is_restart:  # a failed restart is the watchdog's next attempt, not evict-all
            log.warning("manager: restart of %s failed: %s", job.model_name, error)
            self.act.fail(job, error)
            self.watchdog.on_death(job.plan, bool(job.pin), self.table.clock(), None)
            return
        others = len(self.table.in_state(ServerState.READY))
        if not retry_after_failure(error, has_retried=job.has_retried, num_others=others):
            log.warning("manager: load of %s failed: %s", job.model_name, error)
            self.act.fail(job, error)
            return
        log.warning(
            "manager: load of %s failed (%s); evicting all and retrying once",
            job.model_name,
            error,
        )
        job.has_retried = job.evict_all = True
        self.loads.retry_first(job)

    def on_evict_done(self, msg: m.EvictDone) -> None:
        server = self.table.remove(msg.server_id)
        if server is not None:
            server.state = ServerState.STOPPED
            self.table.counters["evictions"] += 1
            if server.is_hung:  # stopped because it stopped answering: bring it back
                self._restart_later(server)
        stopped = self.act.stopped.pop(msg.server_id, None)
        if stopped is not None:
            settle(stopped)

    def on_exited(self, msg: m.Exited) -> None:
        server = self.table.get(msg.server_id)
        if server is not None and server.state is ServerState.READY:
            self._on_dead(server)
        # else: an eviction or a load is handling this process

    def on_probe_failed(self, msg: m.ProbeFailed) -> None:
        server = self.table.get(msg.server_id)
        if server is not None and server.state is ServerState.READY:
            log.warning("manager: backend for %s does not answer; stopping it", server.model_name)
            server.stop_grace_s = 0.5
            server.is_hung = True
            self.act.evict(server)
            self.act.stop(server)  # now: its requests in flight have failed already
        if msg.future is not None:
            settle(msg.future)

    # -- shutdown ----------------------------------------------------------------------
    async def _shutdown(self, msg: m.Stop) -> None:
        """Fail every load and every caller still waiting, end the helper tasks, stop
        every backend process (SIGTERM, then SIGKILL); then answer Stop."""
        await self.engine.close()
        self.watchdog.close()
        self.compute.close()
        error = LoadFailed("The server is shutting down")
        for job in self.loads.drain():
            self.act.fail(job, error)
        for task in list(self.act.tasks):
            task.cancel()
        await asyncio.gather(*self.act.tasks, return_exceptions=True)
        processes = [s.process for s in self.table if s.process is not None]
        while not self.inbox.empty():
            late = self.inbox.get_nowait()
            if isinstance(late, m.LoadDone) and late.process is not None:
                processes.append(late.process)  # a load that ended meanwhile
            future = getattr(late, "future", None)
            if future is not None:  # a caller that asked meanwhile
                is_answer = isinstance(late, m.Stop | m.Probe | m.ProbeFailed)
                settle(future, error=None if is_answer else error)
        await asyncio.gather(*(p.stop(grace_s=2.0) for p in processes), return_exceptions=True)
        for server in self.table:
            server.state = ServerState.STOPPED
        for stopped in self.act.stopped.values():
            settle(stopped)
        self.table.clear()
        self._publish()
        settle(msg.future)
