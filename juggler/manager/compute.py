"""The manager's compute planner: the one owner of the machine's cores (issue 21).

Owned by the owner task, like the table: after every message the owner calls `update`
with the servers, and the planner works out which are busy, asks the pure policy
(`juggler.compute.plan`) for each one's share and writes the shares that changed to the
backends' boards (`juggler.compute.board`), where their workers read them before their
next decode.

Busy means requests in flight, plus a short linger after the last one ends: a client
that sends its next request right after an answer (a chat turn, a stream of embedding
batches) would otherwise make the others' shares flap between every request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from juggler.compute.board import ENV, BoardWriter
from juggler.compute.cpus import allowed_cpus
from juggler.compute.plan import Consumer, Share, plan_shares
from juggler.manager.snapshot import ServerState
from juggler.manager.wrapped import WrappedServer

log = logging.getLogger("juggler.manager")

#: How long a backend counts as busy after its last request ended.
LINGER_S = 0.2


def is_busy(in_flight: int, idle_since: float | None, now: float, linger_s: float) -> bool:
    """Busy: requests in flight, or the last one ended less than `linger_s` ago."""
    if in_flight > 0:
        return True
    return idle_since is not None and now - idle_since < linger_s


def is_planned(server: WrappedServer) -> bool:
    """Only Juggler's own engine follows the plan; `command` backends are other programs."""
    return server.plan.recipe.name == "llamacpp" and server.state in (
        ServerState.LOADING,
        ServerState.READY,
        ServerState.EVICTING,
    )


class ComputePlanner:
    def __init__(
        self,
        *,
        enabled: bool = True,
        cpus: tuple[int, ...] | None = None,
        linger_s: float = LINGER_S,
        folder: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[float], object] | None = None,
    ) -> None:
        """`wake(delay)` asks the owner to call `update` again after `delay` seconds (when
        a linger ends)."""
        self.enabled = enabled
        self.cpus = cpus or allowed_cpus()
        self.linger_s = linger_s
        self.clock = clock
        self._wake = wake
        self._folder = folder
        self._board: BoardWriter | None = None
        self._idle_since: dict[int, float] = {}
        self._was_busy: set[int] = set()
        self._shares: dict[int, Share] = {}
        self._wake_at: float | None = None

    @property
    def board(self) -> BoardWriter:
        if self._board is None:
            self._board = BoardWriter(self._folder)
        return self._board

    def env_for(self, server: WrappedServer) -> Mapping[str, str]:
        """The environment a new backend gets: the path of its board (its share now)."""
        if not is_planned(server):
            return {}
        share = self._shares.get(server.server_id) or Share(len(self.cpus), self.cpus)
        path = self.board.open(server.server_id, share)
        return {ENV: str(path)}

    def share(self, server_id: int) -> Share | None:
        return self._shares.get(server_id)

    def update(self, servers: Iterable[WrappedServer]) -> None:
        """Recompute the plan from the servers' requests in flight and publish changes."""
        now = self.clock()
        planned = [s for s in servers if is_planned(s)]
        consumers = []
        next_wake: float | None = None
        for s in planned:
            key = s.server_id
            if s.in_flight > 0:
                self._was_busy.add(key)
                self._idle_since.pop(key, None)
            elif key in self._was_busy:
                self._was_busy.discard(key)
                self._idle_since[key] = now
            since = self._idle_since.get(key)
            busy = is_busy(s.in_flight, since, now, self.linger_s)
            if busy and s.in_flight == 0 and since is not None:
                end = since + self.linger_s
                next_wake = end if next_wake is None else min(next_wake, end)
            weight = s.options.compute_weight
            consumers.append(
                Consumer(
                    key, busy, weight, fixed_threads=s.plan.threads, offloaded=s.is_fully_offloaded
                )
            )
        shares = plan_shares(consumers, self.cpus, enabled=self.enabled)
        alive = {s.server_id for s in planned}
        for key in list(self._shares):
            if key not in alive:
                self.forget(key)
        for key, share in shares.items():
            if self._shares.get(key) != share:
                self._shares[key] = share
                if self._board is not None:
                    self.board.write(key, share)
        for s in planned:
            s.compute = shares.get(s.server_id)
        if next_wake is not None and self._wake is not None and self._needs_wake(next_wake, now):
            self._wake_at = next_wake
            self._wake(max(0.0, next_wake - now))

    def _needs_wake(self, at: float, now: float) -> bool:
        """Whether a wake at `at` must be asked for: none is pending, or the one pending
        comes later. A pending one that comes first replans then and asks for the next
        (a stream of back-to-back requests restarts its linger at every end: one wake per
        request was one more owner message per request, issue 47)."""
        pending = self._wake_at
        return pending is None or pending <= now or at < pending

    def forget(self, server_id: int) -> None:
        self._shares.pop(server_id, None)
        self._idle_since.pop(server_id, None)
        self._was_busy.discard(server_id)
        if self._board is not None:
            self.board.close(server_id)

    def close(self) -> None:
        if self._board is not None:
            self._board.close_all()
            self._board = None
