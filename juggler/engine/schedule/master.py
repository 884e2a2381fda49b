"""The master: one asyncio task, the only consumer of the global ingress queue.

It owns `session_id -> worker_id` (sessions never migrate), each worker's load, the
prefix-affinity map for stateless requests, the engine-wide counters and latest request
stats, and whether the engine is dead. Routes put commands on the ingress queue
(`submit`) and await the command's future, which the chosen worker resolves; the master
itself never waits on a worker, so one slow command cannot hold up the queue.

Placement (`choose_worker`, pure): a stateless request goes to the worker that holds the
longest run of its prompt's prefix blocks unless that worker is full; work with a LoRA
adapter otherwise goes to the worker that last took that adapter (it has it loaded);
everything else goes to the least-loaded worker; on ties, the one that took work last
(its OpenMP threads and caches are warm: a lone client's requests stay on one worker).

A worker whose thread fails sends `WorkerDied`: from then on the engine is dead, every
new request is refused with `EngineDead` (503) and /health says so, so that the router's
manager replaces the backend.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from juggler.api.histogram import TPOT_BUCKETS, TTFT_BUCKETS, Histogram
from juggler.engine.cache.prefix_cache import best_affinity
from juggler.engine.schedule.messages import (
    AdapterRef,
    AppendInput,
    Cancel,
    Command,
    Complete,
    CreateSession,
    Downsize,
    DropAdapter,
    Embed,
    EndSession,
    EraseSlot,
    Generate,
    RequestDone,
    Rerank,
    SessionGone,
    Shutdown,
    WorkerCommand,
    WorkerDied,
    reply_of,
)
from juggler.engine.schedule.stream import RequestStats
from juggler.errors import EngineDead, JugglerError, SessionNotFound

log = logging.getLogger(__name__)

#: How many prefix-block hashes the master remembers.
AFFINITY_CAPACITY = 8192


class WorkerLike(Protocol):
    def submit(self, cmd: WorkerCommand) -> None: ...


def choose_worker(
    loads: Sequence[int], last: int, *, preferred: int | None = None, capacity: int = 0
) -> int:
    """Pure placement: `preferred` if it has room, else least loaded (ties: `last`, the
    worker that took work last, else the first)."""
    if preferred is not None and (capacity <= 0 or loads[preferred] < capacity):
        return preferred
    low = min(loads)
    if 0 <= last < len(loads) and loads[last] == low:
        return last
    return loads.index(low)


@dataclass
class Totals:
    prompt_tokens_prefilled: int = 0
    prompt_tokens_reused: int = 0
    generation_tokens: int = 0
    requests_finished: int = 0
    #: Seed 004's latency histograms (vLLM's buckets).
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))


def _reject(cmd: Command, exc: BaseException) -> None:
    reply = reply_of(cmd)
    if reply is not None and not reply.done():
        reply.set_exception(exc)


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
    #: Set once a worker died: the engine refuses new requests with it.
    dead: EngineDead | None = None
    #: The worker that took work last (placement's tie-break).
    _last: int = 0
    #: Stateless request id -> its worker, until the request is done.
    _stateless: dict[str, int] = field(default_factory=dict)
    #: LoRA adapter id -> the worker that last took work with it (it has it loaded).
    adapter_home: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loads = [0] * len(self.workers)

    def submit(self, cmd: Command) -> None:
        """Enqueue a command (event loop only; workers post theirs through their outbox)."""
        self.ingress.put_nowait(cmd)

    async def run(self) -> None:
        """The master task: consume the ingress queue until `Shutdown`."""
        while True:
            cmd = await self.ingress.get()
            if isinstance(cmd, Shutdown):
                return
            try:
                self.dispatch(cmd)
            except Exception as exc:  # a bug here must not kill the master
                log.exception("master: %s failed", type(cmd).__name__)
                _reject(cmd, exc)

    def _place(self, worker: int) -> None:
        self.loads[worker] += 1
        self._last = worker

    def dispatch(self, cmd: Command) -> None:
        """Handle one command: the one place the master dispatches on its kind."""
        match cmd:
            case SessionGone(session_id=sid):
                w_gone = self.sessions.pop(sid, None)
                if w_gone is not None:
                    self.loads[w_gone] -= 1
            case RequestDone(request_id=rid, stats=stats):
                w_done = self._stateless.pop(rid, None)
                if w_done is not None:
                    self.loads[w_done] -= 1
                if stats is not None:
                    self._record(stats)
            case WorkerDied(worker_id=wid, error=error):
                log.error("master: worker %d died: %s", wid, error.message)
                if self.dead is None:
                    self.dead = error
            case _ if self.dead is not None:
                _reject(cmd, EngineDead(self.dead.message))
            case CreateSession(session_id=sid):
                w = choose_worker(
                    self.loads,
                    self._last,
                    preferred=self._adapter_home(cmd.adapter),
                    capacity=self.capacity,
                )
                self._place(w)
                self.sessions[sid] = w
                self._note_adapter(cmd.adapter, w)
                self.workers[w].submit(cmd)
            case Downsize(worker_id=wid) | DropAdapter(worker_id=wid) | EraseSlot(worker_id=wid):
                if isinstance(cmd, DropAdapter):
                    self.adapter_home.pop(cmd.adapter_id, None)
                self.workers[wid].submit(cmd)
            case AppendInput() | Generate() | Cancel() | EndSession():
                w_opt = self.sessions.get(cmd.session_id)
                if w_opt is None:
                    _reject(cmd, SessionNotFound(f"session not found: {cmd.session_id}"))
                    return
                self.workers[w_opt].submit(cmd)
            case Complete() | Embed() | Rerank():
                keys = cmd.prefix_keys if isinstance(cmd, Complete) else ()
                adapter = cmd.adapter if isinstance(cmd, Complete) else None
                preferred = best_affinity(keys, self.affinity)
                if preferred is None:
                    preferred = self._adapter_home(adapter)
                w = choose_worker(
                    self.loads, self._last, preferred=preferred, capacity=self.capacity
                )
                self._place(w)
                self._note_adapter(adapter, w)
                self._stateless[cmd.request_id] = w
                for key in keys:
                    self.affinity[key] = w
                    self.affinity.move_to_end(key)
                while len(self.affinity) > AFFINITY_CAPACITY:
                    self.affinity.popitem(last=False)
                self.workers[w].submit(cmd)
            case _:
                log.warning("master: unknown command %s", type(cmd).__name__)
                _reject(cmd, JugglerError(f"unknown command {type(cmd).__name__}"))

    def _adapter_home(self, adapter: AdapterRef | None) -> int | None:
        """Work with an adapter prefers the worker that has it loaded already."""
        return self.adapter_home.get(adapter.adapter_id) if adapter is not None else None

    def _note_adapter(self, adapter: AdapterRef | None, worker: int) -> None:
        if adapter is not None:
            self.adapter_home[adapter.adapter_id] = worker

    def _record(self, stats: RequestStats) -> None:
        self.last_stats = stats
        t = self.totals
        t.prompt_tokens_prefilled += stats.prompt_tokens_prefilled
        t.prompt_tokens_reused += stats.prompt_tokens_reused
        t.generation_tokens += stats.output_tokens
        t.requests_finished += 1
        if stats.output_tokens:
            t.ttft.observe(stats.time_to_first_token)
        for gap in stats.decode_token_times:
            t.tpot.observe(gap)
