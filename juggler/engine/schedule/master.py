"""The master: one asyncio task, the only consumer of the global ingress queue.

It owns `session_id -> worker_id` (sessions never migrate), each worker's load, the
prefix-affinity map for stateless requests, and the engine-wide counters and latest
request stats. Routes put `Command`s on the ingress queue (`submit`) and await the
command's future, which the chosen worker resolves; the master itself never waits on a
worker, so one slow command cannot hold up the queue.

Placement (`choose_worker`, pure): a stateless request goes to the worker that holds the
longest run of its prompt's prefix blocks unless that worker is full; everything else
goes to the least-loaded worker, round-robin on ties.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from juggler.engine.cache.prefix_cache import best_affinity
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.stream import RequestStats
from juggler.errors import SessionNotFound

log = logging.getLogger(__name__)

#: How many prefix-block hashes the master remembers.
AFFINITY_CAPACITY = 8192


class WorkerLike(Protocol):
    def submit(self, cmd: Command) -> None: ...


def choose_worker(
    loads: Sequence[int], cursor: int, *, preferred: int | None = None, capacity: int = 0
) -> int:
    """Pure placement: `preferred` if it has room, else least loaded (ties: the first at or
    after `cursor`, so equal workers take turns)."""
    if preferred is not None and (capacity <= 0 or loads[preferred] < capacity):
        return preferred
    low = min(loads)
    n = len(loads)
    for step in range(n):
        i = (cursor + step) % n
        if loads[i] == low:
            return i
    return 0  # pragma: no cover - unreachable


@dataclass
class Totals:
    prompt_tokens_prefilled: int = 0
    prompt_tokens_reused: int = 0
    generation_tokens: int = 0
    requests_finished: int = 0


@dataclass
class Master:
    workers: Sequence[WorkerLike]
    capacity: int = 0
    ingress: asyncio.Queue[Command] = field(default_factory=asyncio.Queue)
    sessions: dict[str, int] = field(default_factory=dict)
    loads: list[int] = field(default_factory=list)
    affinity: collections.OrderedDict[int, int] = field(default_factory=collections.OrderedDict)
    totals: Totals = field(default_factory=Totals)
    last_stats: RequestStats | None = None
    _cursor: int = 0
    _stateless: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loads = [0] * len(self.workers)

    def submit(self, cmd: Command) -> None:
        """Enqueue a command (event loop only; worker threads use call_soon_threadsafe)."""
        self.ingress.put_nowait(cmd)

    async def run(self) -> None:
        """The master task: consume the ingress queue until SHUTDOWN."""
        while True:
            cmd = await self.ingress.get()
            if cmd.kind is CommandKind.SHUTDOWN:
                return
            try:
                self.dispatch(cmd)
            except Exception as exc:  # a bug here must not kill the master
                log.exception("master: command %s failed", cmd.kind)
                if cmd.reply is not None and not cmd.reply.done():
                    cmd.reply.set_exception(exc)

    def _place(self, worker: int) -> None:
        self.loads[worker] += 1
        self._cursor = (worker + 1) % len(self.workers)

    def dispatch(self, cmd: Command) -> None:
        """Handle one command (the one place the master dispatches on CommandKind)."""
        kind = cmd.kind
        if kind is CommandKind.CREATE_SESSION:
            cmd.session_id = cmd.session_id or uuid.uuid4().hex
            w = choose_worker(self.loads, self._cursor)
            self._place(w)
            self.sessions[cmd.session_id] = w
            self.workers[w].submit(cmd)
        elif kind in (
            CommandKind.APPEND_INPUT,
            CommandKind.GENERATE,
            CommandKind.CANCEL,
            CommandKind.END_SESSION,
        ):
            w_opt = self.sessions.get(cmd.session_id or "")
            if w_opt is None:
                if cmd.reply is not None and not cmd.reply.done():
                    cmd.reply.set_exception(SessionNotFound(f"session not found: {cmd.session_id}"))
                return
            self.workers[w_opt].submit(cmd)
        elif kind in (CommandKind.COMPLETE, CommandKind.EMBED, CommandKind.RERANK):
            cmd.session_id = cmd.session_id or uuid.uuid4().hex
            preferred = best_affinity(cmd.prefix_keys, self.affinity)
            w = choose_worker(self.loads, self._cursor, preferred=preferred, capacity=self.capacity)
            self._place(w)
            self._stateless[cmd.session_id] = w
            for key in cmd.prefix_keys:
                self.affinity[key] = w
                self.affinity.move_to_end(key)
            while len(self.affinity) > AFFINITY_CAPACITY:
                self.affinity.popitem(last=False)
            self.workers[w].submit(cmd)
        elif kind is CommandKind.SESSION_GONE:
            w_gone = self.sessions.pop(cmd.session_id or "", None)
            if w_gone is not None:
                self.loads[w_gone] -= 1
        elif kind is CommandKind.REQUEST_DONE:
            w_done = self._stateless.pop(cmd.session_id or "", None)
            if w_done is not None:
                self.loads[w_done] -= 1
            if cmd.stats is not None:
                self._record(cmd.stats)
        else:
            log.warning("master: unknown command %s", kind)
            if cmd.reply is not None and not cmd.reply.done():
                cmd.reply.set_exception(RuntimeError(f"unknown command {kind}"))

    def _record(self, stats: RequestStats) -> None:
        self.last_stats = stats
        t = self.totals
        t.prompt_tokens_prefilled += stats.prompt_tokens_prefilled
        t.prompt_tokens_reused += stats.prompt_tokens_reused
        t.generation_tokens += stats.output_tokens
        t.requests_finished += 1
