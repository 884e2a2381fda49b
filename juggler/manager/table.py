"""The residency table: the WrappedServers by id, their LRU clock and the counters.

Owned by the owner task (owner.py), which is its only caller; it does no I/O. Besides
the records it hands out the views the policy decides on and the immutable
`TableSnapshot` the owner publishes after every message.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from juggler.manager.policy import ServerView
from juggler.manager.pressure import MemoryView
from juggler.manager.recipes import LaunchPlan
from juggler.manager.snapshot import MemoryStatus, ServerState, TableSnapshot
from juggler.manager.watchdog import Watchdog
from juggler.manager.wrapped import WrappedServer


class ServerTable:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.counters: collections.Counter[str] = collections.Counter()
        self._servers: dict[int, WrappedServer] = {}
        self._next_id = 0
        self._stamp = 0.0
        self._loads_by_name: collections.Counter[str] = collections.Counter()

    def __iter__(self) -> Iterator[WrappedServer]:
        return iter(list(self._servers.values()))

    def get(self, server_id: int) -> WrappedServer | None:
        return self._servers.get(server_id)

    def add(self, plan: LaunchPlan, pinned: bool) -> WrappedServer:
        """A new LOADING record for `plan`; its start is a use (seed 000)."""
        self._next_id += 1
        self._loads_by_name[plan.info.name] += 1
        server = WrappedServer(
            self._next_id, plan, self.log_dir, self._loads_by_name[plan.info.name], self._now()
        )
        server.pinned = pinned
        self._servers[server.server_id] = server
        return server

    def remove(self, server_id: int) -> WrappedServer | None:
        return self._servers.pop(server_id, None)

    def clear(self) -> None:
        self._servers.clear()

    def touch(self, server: WrappedServer) -> None:
        """Refresh `server`'s last use (a load or a request starts or completes)."""
        server.last_use = self._now()

    def clock(self) -> float:
        """Now on the `last_use` clock (wall time), without advancing the LRU stamp."""
        return time.time()

    def _now(self) -> float:
        # Strictly increasing, so LRU order is exact even within one clock tick.
        self._stamp = max(time.time(), self._stamp + 1e-6)
        return self._stamp

    def in_state(self, state: ServerState) -> list[WrappedServer]:
        return [s for s in self._servers.values() if s.state is state]

    def ready(self, name: str) -> WrappedServer | None:
        """The ready server of model `name`, if any (there is at most one)."""
        return next((s for s in self.in_state(ServerState.READY) if s.model_name == name), None)

    def ready_by_name(self) -> dict[str, WrappedServer]:
        return {s.model_name: s for s in self.in_state(ServerState.READY)}

    def memory_views(self, global_auto_evict: bool) -> list[MemoryView]:
        """The ready servers as seed 002's memory policy sees them."""
        return [s.memory_view(global_auto_evict) for s in self.in_state(ServerState.READY)]

    def views(
        self, state: ServerState = ServerState.READY, per_pid: Mapping[int, int] | None = None
    ) -> list[ServerView]:
        """The servers in `state` as the policy sees them (`per_pid`: NVML's VRAM per
        process, where it answered)."""
        return [s.view(per_pid) for s in self.in_state(state)]

    def snapshot(
        self,
        limits: tuple[int, ...],
        num_queued: int,
        watchdog: Watchdog,
        memory: MemoryStatus | None = None,
    ) -> TableSnapshot:
        ready = self.in_state(ServerState.READY)
        servers = tuple(s.snapshot() for s in self._servers.values())
        # Ids grow with each load and loads are serialized: the highest is the newest.
        newest = max(ready, key=lambda s: s.server_id).server_id if ready else None
        return TableSnapshot(
            limits=limits,
            servers=servers,
            most_recent=next((s for s in servers if s.server_id == newest), None),
            views=tuple(s.view() for s in ready),
            num_queued=num_queued,
            counters=tuple(sorted(self.counters.items())),
            restarting=tuple(
                (r.model_name, r.attempt, r.due_at) for r in watchdog.pending.values()
            ),
            gave_up=tuple(sorted(watchdog.gave_up)),
            memory=memory,
        )
