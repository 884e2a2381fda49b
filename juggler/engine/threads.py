"""The backend's side of the compute plan: how many threads each worker decodes with,
and on which cores the process runs.

Every worker asks `threads_for(worker_id)` right before each decode, and says `idle`
when it runs out of work. The governor reads the share the manager published
(`compute.board`, one 8-byte read when nothing changed), divides the share's threads
among the workers that decoded recently and have not gone idle since, and, when the
share's cores changed, moves every thread of the process onto them. A plan change thus
reaches a busy backend at its next decode step.

Without a board (a backend started by hand) the share is every core the process may use,
still divided among busy workers. A backend given explicit `--threads` keeps them: each
worker decodes with that many and the process is never moved; so does every worker when
the router's plan is off (`compute_plan: false`, a share marked fixed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from juggler.compute.board import BoardReader
from juggler.compute.cpus import allowed_cpus, pin_process
from juggler.compute.plan import Share, split_threads
from juggler.engine.omp import release_pool

log = logging.getLogger(__name__)

#: A worker that decoded within this long counts as busy when threads are divided.
ACTIVE_WINDOW_S = 0.25


class ThreadGovernor:
    """Thread counts for one backend's workers; any worker thread may call it."""

    def __init__(
        self,
        *,
        fixed_threads: int = 0,
        board: BoardReader | None = None,
        clock: Callable[[], float] = time.monotonic,
        pin: Callable[[tuple[int, ...]], None] = pin_process,
        release: Callable[[], bool] = release_pool,
    ) -> None:
        self.fixed_threads = fixed_threads
        self._board = board if fixed_threads <= 0 else None
        self._clock = clock
        self._pin = pin
        self._lock = threading.Lock()
        self._active: dict[int, float] = {}
        own = allowed_cpus()
        self._own = Share(len(own), own, fixed=True)
        self._pinned: tuple[int, ...] | None = None
        #: Each worker's thread count at its last decode (reported on /health).
        self.applied: dict[int, int] = {}
        #: Workers given more than one thread since they last gave back their OpenMP
        #: pool (`engine.omp`), and the most they were given: what that pool may hold.
        self._pools: dict[int, int] = {}
        self._release = release
        #: How to wake each worker while it waits idle, and the idle workers woken since
        #: they last decoded or gave their pool back (see `on_wake`).
        self._wakers: dict[int, Callable[[], None]] = {}
        self._woken: set[int] = set()

    def on_wake(self, worker_id: int, wake: Callable[[], None]) -> None:
        """`wake()` makes idle `worker_id` call `idle` again at once (a `Recheck` in its
        inbox). A worker whose decodes an idle worker's pool holds back wakes it, so the
        pool is given back now, not at that worker's next idle tick (up to `idle_wait_s`:
        a lone stream after a burst decoded with one of two threads for half a second)."""
        self._wakers[worker_id] = wake

    def share(self) -> Share:
        """The share in force: the board's, else the process's own cores."""
        if self.fixed_threads > 0:
            return Share(self.fixed_threads, self._own.cpus, fixed=True)
        got = self._board.read() if self._board is not None else None
        return got if got is not None else self._own

    def threads_for(self, worker_id: int) -> int:
        """The threads `worker_id` decodes with now; marks it busy."""
        with self._lock:
            now = self._clock()
            self._active[worker_id] = now
            self._woken.discard(worker_id)
            n = self._count(worker_id, now)
            self.applied[worker_id] = n
            if n > 1:
                self._pools[worker_id] = n
            return n

    def _count(self, worker_id: int, now: float) -> int:
        if self.fixed_threads > 0:
            return self.fixed_threads
        share = self.share()
        if share.fixed and self._board is not None:  # the plan is off: all cores each
            return share.threads
        if share.cpus != self._pinned and self._board is not None:
            self._pinned = share.cpus
            self._pin(share.cpus)
        active = sorted(w for w, t in self._active.items() if now - t < ACTIVE_WINDOW_S)
        n = split_threads(share.threads, len(active))[active.index(worker_id)]
        # libgomp counts the threads of every worker's pool, idle ones too: past the
        # cores, all its helpers sleep after each decode. Stay within them.
        held = 0
        for w, pool in self._pools.items():
            if w == worker_id:
                continue
            held += pool - 1
            if w not in self._active and w not in self._woken and w in self._wakers:
                self._woken.add(w)  # idle, holding a pool: ask it to give it back
                self._wakers[w]()
        return max(1, min(n, share.threads - held))

    def idle(self, worker_id: int) -> None:
        """`worker_id` has nothing to decode (it is about to wait for a command): from
        their next decode on, the busy workers divide its threads (a lone stream on one
        of two workers decodes with every thread, not half of them). Called on the
        worker's own thread, and again while it stays idle: once another worker decodes,
        it gives back the OpenMP pool it may hold, so that the busy worker may use every
        thread with its helpers spinning (`engine.omp`). Not before: giving a pool back
        and starting it again costs milliseconds, and the next request may be its own."""
        with self._lock:
            self._active.pop(worker_id, None)
            now = self._clock()
            others = any(now - t < ACTIVE_WINDOW_S for t in self._active.values())
            give_back = worker_id in self._pools and others
            if give_back:
                del self._pools[worker_id]
                self._woken.discard(worker_id)
        if give_back:
            self._release()

    def status(self) -> dict[str, object]:
        """For /health: the share and each worker's threads at its last decode."""
        share = self.share()
        return {
            **share.as_json(),
            "planned": self._board is not None,
            "workers": {str(k): v for k, v in sorted(self.applied.items())},
        }


def governor_from(fixed_threads: int, board: BoardReader | None) -> ThreadGovernor:
    if fixed_threads > 0:
        log.info("threads: %d per worker, outside the compute plan", fixed_threads)
    elif board is not None:
        log.info("threads: following the router's compute plan")
    return ThreadGovernor(fixed_threads=fixed_threads, board=board)
