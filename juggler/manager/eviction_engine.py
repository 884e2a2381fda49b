"""Seed 002's eviction engine, carried out in the owner task: downsize idle models,
evict idle ones, relieve memory pressure.

It owns the global switch (`auto_evict`) and the threshold (both changeable at run time),
the memory monitor (running only while some model is opted in), the idle timer, and the
futures of downsizes in flight. Decisions come from `pressure.py` (pure); evictions go
through `Actions.evict` like any other, so busy servers are still never stopped, and a
request for a model being evicted still waits and loads it again (the rescue).
Downsizing marks the server DOWNSIZING (see `MemState`) and asks its backend to free its
contexts; a request that arrives meanwhile, or later, is served at once: the backend
restores its contexts itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from juggler.manager import messages as m
from juggler.manager import tasks
from juggler.manager.actions import Actions, settle
from juggler.manager.memory import MemorySample, kind_of
from juggler.manager.monitor import Monitor
from juggler.manager.pressure import Action, Step, idle_actions, relief_step
from juggler.manager.snapshot import MemoryStatus, MemState, ServerState
from juggler.manager.table import ServerTable
from juggler.manager.wrapped import WrappedServer

log = logging.getLogger("juggler.manager")

#: How long a backend may take to free its contexts.
DOWNSIZE_TIMEOUT_S = 30.0
#: The background pass downsizes no model sooner than this after its last use (Lemonade
#: evaluates idle models on a cadence: a model is `ready` right after its load even with
#: `downsize_idle_timeout=0`; the explicit evaluation, `simulate(-1)`, has no floor).
MIN_BACKGROUND_IDLE_S = 2.0


class EvictionEngine:
    def __init__(
        self,
        table: ServerTable,
        act: Actions,
        monitor: Monitor,
        *,
        auto_evict: bool,
        threshold: float,
    ) -> None:
        self.table = table
        self.act = act
        self.monitor = monitor
        self.auto_evict = auto_evict
        self.threshold = threshold
        self.counters: Counter[str] = table.counters
        #: Per server being downsized: done when its backend answered.
        self._downsizing: dict[int, asyncio.Future[None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    # -- after every owner message -------------------------------------------------
    def after_message(self) -> None:
        """Seed 002's idle timeouts, then the monitor on exactly while it is wanted (run
        after every manager message: two a request, so the policy is asked once when it
        has nothing to do)."""
        actions, next_at = self._idle_actions(MIN_BACKGROUND_IDLE_S)
        if actions:
            self.run(actions)
            next_at = self._idle_actions(MIN_BACKGROUND_IDLE_S)[1]
        self._arm_timer(next_at)
        self.monitor.ensure(self.is_wanted)

    @property
    def is_wanted(self) -> bool:
        """Issue 11: the monitor runs "only while `auto_evict` is on anywhere"."""
        return self.auto_evict or any(
            s.options.auto_evict for s in self.table.in_state(ServerState.READY)
        )

    def _idle_actions(self, min_downsize_idle_s: float) -> tuple[list[Action], float | None]:
        views = self.table.memory_views(self.auto_evict)
        return idle_actions(views, self.table.clock(), min_downsize_idle_s)

    def _arm_timer(self, next_at: float | None) -> None:
        if next_at == self._timer_at:
            return
        self.cancel_timer()
        self._timer_at = next_at
        if next_at is not None:
            delay = max(0.0, next_at - self.table.clock()) + 0.01
            self._timer = asyncio.get_running_loop().call_later(delay, self.act.post, m.Tick())

    def on_timer(self) -> None:
        self._timer = self._timer_at = None  # after_message runs next and acts

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None

    # -- messages --------------------------------------------------------------------
    def on_sample(self, sample: MemorySample, memory: str = "host") -> None:
        """The monitor measured (`memory`: "gpu" or "host"): one relief step if under
        pressure and no step runs."""
        if self._downsizing:
            return  # measure again after that step
        views = self.table.memory_views(self.auto_evict)
        action = relief_step(views, sample, self.threshold, self.table.clock(), memory)
        if action is not None:
            log.warning(
                "manager: %s memory at %.0f%% (threshold %.0f%%): %s %s",
                memory,
                sample.fraction * 100,
                self.threshold * 100,
                action.step.value,
                action.model_name,
            )
            self.counters[f"pressure_{action.step.value}s"] += 1
            self.run([action])

    def on_set(self, msg: m.SetMemory) -> None:
        if msg.auto_evict is not None:
            self.auto_evict = msg.auto_evict
        if msg.threshold is not None:
            self.threshold = msg.threshold
        settle(msg.future)

    def on_simulate(self, msg: m.Simulate) -> None:
        """Lemonade's test hook: `pct` at or above the threshold runs one pressure step
        as if usage were `pct`; -1 runs the idle timeouts now (Lemonade: "Synchronously
        execute one idle-only eviction-engine evaluation"); anything else nothing.
        Answered once every downsize, this one's and any already running, is done and
        evictions have started."""
        views = self.table.memory_views(self.auto_evict)
        now = self.table.clock()
        actions: list[Action] = []
        if msg.pct == -1:
            actions = self._idle_actions(0.0)[0]
        elif msg.pct >= self.threshold:
            sample = MemorySample(int(msg.pct * msg.total_bytes), msg.total_bytes)
            step = relief_step(views, sample, self.threshold, now)
            actions = [step] if step is not None else []
        self.run(actions)
        waits = list(self._downsizing.values())
        done = [(a.model_name, a.step.value) for a in actions]
        if not waits:
            settle(msg.future, done)
            return
        gathered = asyncio.gather(*waits)
        gathered.add_done_callback(lambda _: settle(msg.future, done))

    def on_downsize_done(self, msg: m.DownsizeDone) -> None:
        server = self.table.get(msg.server_id)
        if server is not None and server.memory is MemState.DOWNSIZING:
            server.memory = MemState.DOWNSIZED if msg.is_downsized else MemState.ACTIVE
            if msg.is_downsized:
                self.counters["downsizes"] += 1
        waiting = self._downsizing.pop(msg.server_id, None)
        if waiting is not None:
            settle(waiting)

    # -- acting ----------------------------------------------------------------------
    def run(self, actions: list[Action]) -> list[asyncio.Future[None]]:
        """Carry the actions out; returns futures of the downsizes started."""
        waits: list[asyncio.Future[None]] = []
        by_name = self.table.ready_by_name()
        for action in actions:
            server = by_name.get(action.model_name)
            if server is None:
                continue
            if action.step is Step.EVICT:
                log.info("manager: evicting %s (seed 002)", server.model_name)
                self.counters["auto_evictions"] += 1
                self.act.evict(server)
            elif server.memory is MemState.ACTIVE:
                waits.append(self._downsize(server))
        return waits

    def _downsize(self, server: WrappedServer) -> asyncio.Future[None]:
        assert server.process is not None
        log.info("manager: downsizing %s (seed 002's soft idle)", server.model_name)
        server.memory = MemState.DOWNSIZING
        done = asyncio.get_running_loop().create_future()
        self._downsizing[server.server_id] = done
        self.act.spawn(
            tasks.downsize(server.process, server.server_id, DOWNSIZE_TIMEOUT_S, self.act.post)
        )
        return done

    def status(self) -> MemoryStatus:
        last = self.monitor.last
        source = self.monitor.source
        by_name = self.monitor.last_by_name
        return MemoryStatus(
            auto_evict=self.auto_evict,
            threshold=self.threshold,
            source=source.name if source is not None else "none",
            is_monitoring=self.monitor.is_running,
            used_bytes=last.used_bytes if last else None,
            total_bytes=last.total_bytes if last else None,
            sources=tuple((s.name, kind_of(s), by_name.get(s.name)) for s in self.monitor.sources),
        )

    async def close(self) -> None:
        self.cancel_timer()
        await self.monitor.close()
        for waiting in self._downsizing.values():
            settle(waiting)
