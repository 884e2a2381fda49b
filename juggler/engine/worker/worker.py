"""An inference worker: one thread that owns one llama context and batches its sessions.

Only this thread touches the context, its batch and its sessions. Others talk to it by
`submit(cmd)` (a thread-safe inbox, drained once per tick) and get answers on the
command's future; tokens go straight to each request's `StreamSink`.

The worker is parts with one owner each, all on this thread: `Worker` owns the context,
the loop and its flags; `SessionTable` the sessions; `KvBook` the KV bookkeeping;
`Decoder` the batch and the decode; `SessionInputs` and `Generations` turn input into
tokens and tokens into text; `SessionApi` carries out each command and owns the queue of
waiting stateless requests. The decisions are pure functions (`schedule.batch`,
`cache.prefix_cache`, `policy`, which also states the context-overflow policy).

The loop, once per tick (`step`):
1. Drain the inbox (block on it when there is nothing to do) and apply each command.
2. Finish generations whose consumer cancelled or went away.
3. Admit waiting stateless requests onto a sequence (reusing a cached prefix if any).
4. Make room: evict cached sequences (LRU) when the plan needs more KV cells.
5. `batch.schedule()` builds the plan: one decode row per generating session, bounded
   prefill chunks, logits only where a token will be sampled.
6. Fill the batch and decode once (llama.cpp releases the GIL meanwhile).
7. Post-process: commit decoded tokens to each session, sample each logit row with its
   owner's sampler chain, push text to its stream, finish on EOG / stop / budget.
8. Flush the outbox: one event-loop wake-up delivers every stream's new text (replies
   to commands are also flushed after step 1 and before the decode, and always before
   the thread sleeps).
A stream decoding alone, with no command in the inbox, skips steps 1 to 5: its next tick
is the same one chunk (its token and drafts), so `Decoder.run_lone` decodes it at once
(any command, and anything that changes the chunk, brings the full tick back).
An idle worker parks its cached prefixes and compacts its KV cells (`kv`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections.abc import Callable

from juggler.engine.llama.chat import ChatTemplate
from juggler.engine.llama.ports import LlamaModel
from juggler.engine.schedule.messages import (
    AppendInput,
    Cancel,
    Complete,
    CreateSession,
    Downsize,
    DropAdapter,
    EndSession,
    EraseSlot,
    Generate,
    Notice,
    Recheck,
    Shutdown,
    WorkerCommand,
    reply_of,
)
from juggler.engine.threads import ThreadGovernor
from juggler.engine.worker import slots
from juggler.engine.worker.adapters import AdapterSet, can_run, drop_unregistered
from juggler.engine.worker.assembly import assemble
from juggler.engine.worker.config import Clock, WorkerConfig, WorkerSnapshot
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.decoder import Decoder, Outcome
from juggler.engine.worker.downsize import SoftIdle
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.owner_thread import OwnerThread
from juggler.engine.worker.session_api import SessionApi
from juggler.engine.worker.snapshot import take_snapshot
from juggler.engine.worker.table import SessionTable
from juggler.errors import EngineDead, JugglerError

log = logging.getLogger(__name__)

#: Longest a published snapshot lags the worker's counters while nothing else changes.
PUBLISH_EVERY_S = 0.05


class Worker(OwnerThread):
    """One worker thread. `start()`, `submit()` and `stop()` may be called from any thread;
    the unit tests instead call `open()`, `step()` and `close()` on their own thread."""

    # The parts that exist once the context does (made by `open`, on the worker thread).
    ctx: ContextSlot
    kv: KvBook
    gens: Generations
    api: SessionApi
    decoder: Decoder
    soft_idle: SoftIdle
    adapters: AdapterSet

    def __init__(
        self,
        worker_id: int,
        model: LlamaModel,
        config: WorkerConfig,
        template: ChatTemplate,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Notice], None],
        governor: ThreadGovernor | None = None,
    ) -> None:
        super().__init__("worker", worker_id, loop, deliver, kv_total=config.n_ctx)
        #: The compute plan's thread count for this worker (None: the config's, fixed).
        self.governor = governor
        if governor is not None:
            governor.on_wake(worker_id, lambda: self._inbox.put(Recheck()))
        self.model = model
        self.config = config
        self.template = template
        self.clock = Clock()
        self.table = SessionTable(config.n_seq_max)
        self.is_stopping = False
        #: Nothing fits in the KV cells: no decode until a command changes that.
        self.is_stalled = False
        #: The short wait for a generate after appended input is spent (`_take_commands`).
        self.grace_used = False
        #: Commands applied so far, and what the last snapshot was taken at (`step`).
        self.num_dispatched = 0
        self._published_key: tuple[int, ...] = ()
        self._published_at = 0.0
        #: The last snapshot taken, as this thread sees it (the loop's is `snapshot`).
        self.own_snapshot = self.snapshot

    # -- lifecycle (the worker thread) ---------------------------------------------------
    def open(self) -> None:
        parts = assemble(
            self.model,
            self.config,
            self.template,
            self.table,
            self.outbox,
            self.notify,
            self.clock,
            self.worker_id,
            self.governor,
            self._crowded,
        )
        self.ctx, self.kv, self.adapters = parts.ctx, parts.kv, parts.adapters
        self.gens, self.api, self.decoder = parts.gens, parts.api, parts.decoder
        self.soft_idle = parts.soft_idle
        self.publish()

    def serve(self) -> None:
        while not self.is_stopping:
            self.step()
            self.outbox.flush()
            self.progress_at = time.monotonic()
            snap = self.own_snapshot
            self.holds_work = bool(snap.num_running or snap.num_waiting) or self.has_commands()

    def close(self) -> None:
        for s in list(self.table.values()):
            if s.generation is not None:
                self.gens.finish(s, "cancelled", error=JugglerError("the backend is shutting down"))
        self.outbox.flush()
        if self.decoder.media is not None:
            self.decoder.media.close()
        self.decoder.batch.close()
        self.adapters.close()
        self.ctx.close()
        self.kv.spill.close()

    def has_commands(self) -> bool:
        return not self._inbox.empty()

    def _crowded(self) -> bool:
        """Whether requests wait to start: commands not applied yet, or admissions."""
        return bool(self._inbox.qsize() or self.api.waiting or self.api.pending)

    def fail_all(self, error: EngineDead) -> None:
        self.gens.abort_all(error)
        self.api.reject_all(error)

    # -- the loop ---------------------------------------------------------------------------
    def has_work(self) -> bool:
        if self.is_stalled:
            return False
        if self.api.waiting:
            return True
        sessions = self.table.values()
        return any(
            s.has_seq
            and (s.generation is not None or len(s.pending) > 1 or (s.needs_logits and s.pending))
            and can_run(self.adapters, s, sessions)
            for s in sessions
        )

    def step(self) -> None:
        """One tick of the loop (see the module doc); steps 2 to 7 are the `Decoder`'s.
        While one stream runs alone and no command comes, its tick skips the planning
        (`Decoder.run_lone`)."""
        lone = self.decoder.lone_ready() if not self._inbox.qsize() else None
        if lone is not None:
            self.clock.tick += 1
            self.decoder.run_lone(lone)
            self._publish_if_changed()
            return
        self._take_commands()  # 1.
        if self.is_stopping:
            return
        self.outbox.flush()
        self.clock.tick += 1
        if self.decoder.run(self.clock.tick) is Outcome.STALLED:
            self.is_stalled = True
        self._publish_if_changed()

    def _publish_if_changed(self) -> None:
        """Publish after a tick that changed what runs or waits (a command, a generation
        begun or ended, a stall), else at most every `PUBLISH_EVERY_S`: between those only
        counters move, and taking a snapshot every token was a tenth of a lone stream's
        host time per token (issue 23)."""
        gens, api = self.gens, self.api
        key = (
            self.num_dispatched,
            gens.num_begun,
            gens.num_finished,
            len(api.waiting),
            len(api.pending),
            self.is_stalled,
        )
        now = time.monotonic()
        if key != self._published_key or now - self._published_at >= PUBLISH_EVERY_S:
            self._published_key, self._published_at = key, now
            self.publish()

    def on_idle(self) -> None:
        """Nothing happened for `idle_wait_s`: park cached prefixes, compact the KV."""
        self.kv.park_cached()
        t0 = time.perf_counter()
        moved = self.kv.compact()
        ms = (time.perf_counter() - t0) * 1000
        if moved:
            log.debug("worker %d: compacted %d sequences in %.1f ms", self.worker_id, moved, ms)
        self.publish()

    def publish(self) -> None:
        """Replace the snapshot the event loop reads for /stats and /metrics. It travels
        through the outbox, behind everything queued before it: a snapshot that shows a
        request ended never reaches the loop before that request's `RequestDone` (whose
        stats /metrics reads beside it), so no scrape sees one without the other (a
        scrape did: no request running, and the first-token histogram one short)."""
        self.own_snapshot = snap = take_snapshot(self)
        self.outbox.call(self._show, snap)

    def _show(self, snap: WorkerSnapshot) -> None:
        """On the event loop: the snapshot it reads from now on."""
        self.snapshot = snap

    # -- commands --------------------------------------------------------------------------
    def _take_commands(self) -> None:
        """Apply the queued commands. Idle: block for one (after `idle_wait_s` with none,
        run the idle upkeep). When only appended input waits to be prefilled, wait a
        moment for more: a generate usually follows at once, and one decode does both."""
        cfg = self.config
        # Whether there is work, known until a command is applied (it is asked once a
        # tick: each question walks the sessions, on a lone stream's critical path).
        busy: bool | None = self.has_work()
        waiting_idle = not busy
        timeout = cfg.idle_wait_s if waiting_idle else 0.0
        if waiting_idle and self.governor is not None:
            self.governor.idle(self.worker_id)
        while True:
            if timeout:  # about to block: never sleep on undelivered replies
                self.outbox.flush()
                self.ctx.settle()
            cmd = self._next_command(timeout)
            if isinstance(cmd, Recheck):  # another worker decodes: look again now
                if waiting_idle and self.governor is not None:
                    self.governor.idle(self.worker_id)
                continue
            if cmd is None:
                if busy is None:
                    busy = self.has_work()
                if not self.grace_used and busy and self._only_eager_work():
                    self.grace_used = True
                    waiting_idle = False
                    timeout = cfg.eager_grace_s
                    continue
                if waiting_idle and not busy:
                    self.on_idle()
                return
            busy = None
            waiting_idle = False
            timeout = 0.0
            self.grace_used = False
            self.is_stalled = False
            self.dispatch(cmd)
            if self.is_stopping:
                return

    def _next_command(self, timeout: float) -> WorkerCommand | None:
        """The next queued command, waiting up to `timeout` seconds for one (0: none).
        Most ticks of a running generation find the inbox empty: that is checked without
        raising and catching `queue.Empty`."""
        if not timeout and not self._inbox.qsize():
            return None
        try:  # only this thread takes from the inbox: a counted command is there
            return self._inbox.get(timeout=timeout) if timeout else self._inbox.get_nowait()
        except queue.Empty:
            return None

    def _only_eager_work(self) -> bool:
        """Only appended input waits, none of it ending in a speculative header (which
        is worth prefilling at once: its logits are kept for the generate)."""
        return not self.api.waiting and not any(s.needs_logits for s in self.table.values())

    def dispatch(self, cmd: WorkerCommand) -> None:
        """Apply one command: the one place a worker dispatches on a command's kind."""
        self.num_dispatched += 1
        self.decoder.lone = None  # a command may change what runs: plan the next tick
        try:
            match cmd:
                case Shutdown():
                    self.is_stopping = True
                case Downsize():
                    self.outbox.resolve(cmd.reply, self.soft_idle.downsize())
                    self.publish()
                case Complete():
                    self.soft_idle.restore()
                    self.api.enqueue(cmd)
                case CreateSession():
                    self.soft_idle.restore()
                    self.api.create(cmd)
                case AppendInput():
                    self.soft_idle.restore()
                    self.api.append(cmd)
                case Generate():
                    self.soft_idle.restore()
                    self.api.generate(cmd)
                case DropAdapter():
                    unloaded = drop_unregistered(self.adapters, self.kv, cmd.adapter_id)
                    self.outbox.resolve(cmd.reply, unloaded)
                case EraseSlot():
                    self.outbox.resolve(cmd.reply, slots.erase(self.table, self.kv, cmd.seq_id))
                    self.publish()
                case Cancel():
                    self.api.cancel(cmd)
                case EndSession():
                    self.api.end(cmd)
                case _:
                    name = type(cmd).__name__
                    log.warning("worker %d: unknown command %s", self.worker_id, name)
                    self.outbox.reject(reply_of(cmd), JugglerError(f"unknown command {name}"))
        except JugglerError as exc:
            self.outbox.reject(reply_of(cmd), exc)
        except Exception as exc:
            log.exception("worker %d: %s failed", self.worker_id, type(cmd).__name__)
            self.outbox.reject(reply_of(cmd), JugglerError(f"internal error: {exc}"))
