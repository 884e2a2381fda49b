"""An inference worker: one thread that owns one `llama_context` and batches its sessions.

Only this thread touches the context, its batch and its sessions. Others talk to it by
`submit(Command)` (a thread-safe inbox, drained once per tick) and get answers on the
command's future; tokens go straight to each request's `StreamSink`.

The loop, once per tick:
1. Drain the inbox (block on it when there is nothing to do) and apply each command.
2. Finish generations whose consumer cancelled or went away.
3. Admit waiting stateless requests onto a sequence (reusing a cached prefix if any).
4. Make room: evict cached sequences (LRU) when the plan needs more KV cells.
5. `batch.schedule()` builds the plan: one decode row per generating session, bounded
   prefill chunks, logits only where a token will be sampled.
6. Fill the `llama_batch` and `llama_decode` once (the GIL is released meanwhile).
7. Post-process: commit decoded tokens to each session, sample each logit row with its
   owner's sampler chain, push text to its stream, finish on EOG / stop / budget.
8. Flush the outbox: one event-loop wake-up delivers every stream's new text (replies
   to commands are also flushed after step 1 and before the decode, and always before
   the thread sleeps).
An idle worker (nothing to do for IDLE_WAIT_S) parks its cached prefixes and compacts
its KV cells; see `kv_upkeep`.

Context overflow policy (the README quotes this). No silent truncation, no whole-cache
clear, no dropping of a live session's KV:
- Each sequence holds at most `--ctx-size` tokens. A prompt or a session input that would
  not fit is refused with 400 `context_length_exceeded`; a generation that reaches the end
  of its sequence stops with finish_reason "length".
- The worker's sequences share `--ctx-size` KV cells (unified KV). Cached sequences of
  finished stateless requests are evicted, least recently used first, whenever cells are
  needed. New work that does not fit in the cells that live sessions leave free is
  refused up front with 400 `context_length_exceeded` (session /input and /generate; a
  stateless request instead waits while other generations run, since they free cells).
- If running generations still exhaust the cells, the generations that cannot get a cell
  end with a `context_length_exceeded` error event; their sessions keep their KV.
Idle sessions are never reclaimed behind the client's back: end them (DELETE) to free
their cells.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import time
from collections.abc import Callable

from juggler.engine.cache.parking import ParkedStore
from juggler.engine.cache.prefix_cache import (
    HIT_WINDOW,
    CachedSeq,
    Reuse,
    choose_evictions,
    choose_reuse,
)
from juggler.engine.llama.chat import ChatTemplate
from juggler.engine.llama.native import Batch, Context, ContextParams, Model
from juggler.engine.schedule import batch as batching
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.stream import EventKind, StreamEvent
from juggler.engine.worker.config import WorkerConfig, WorkerSnapshot
from juggler.engine.worker.kv import KvUpkeep
from juggler.engine.worker.owner_thread import OwnerThread
from juggler.engine.worker.session import Session, SessionState
from juggler.engine.worker.session_api import SessionOps
from juggler.errors import ContextOverflow, JugglerError

log = logging.getLogger(__name__)

#: How long an idle worker waits for a generate before prefilling appended input alone.
EAGER_PREFILL_GRACE_S = 0.03
#: How long a worker waits for commands when it has nothing to do; after that long
#: idle it compacts its KV cells if sequences were removed since it last did.
IDLE_WAIT_S = 0.5


class Worker(OwnerThread, SessionOps, KvUpkeep):
    """One worker thread. `start()` and `submit()` may be called from any thread."""

    def __init__(
        self,
        worker_id: int,
        model: Model,
        config: WorkerConfig,
        template: ChatTemplate,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Command], None],
    ) -> None:
        super().__init__("worker", worker_id, model, config, loop, deliver)
        self.template = template
        self._stopping = False
        self._stalled = False
        self._grace_used = False
        self._tick = 0
        self._num_decodes = 0
        self._decode_s = 0.0
        self._num_compactions = 0
        self._removals_at_compaction = 0
        self.sessions: dict[str, Session] = {}
        self.waiting: collections.deque[Command] = collections.deque()
        self.recent_hits: collections.deque[bool] = collections.deque(maxlen=HIT_WINDOW)
        self.ctx: Context | None = None
        self.batch: Batch | None = None
        self.cache_cells = (
            config.cache_cells if config.cache_cells is not None else config.n_ctx // 8
        )
        self.parked = ParkedStore(
            config.parked_cells if config.parked_cells is not None else config.n_ctx
        )

    # -- worker thread ---------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        try:
            self.ctx = Context(
                self.model,
                ContextParams(
                    n_ctx=cfg.n_ctx,
                    n_batch=cfg.n_batch,
                    n_ubatch=cfg.n_batch,
                    n_seq_max=cfg.n_seq_max,
                    n_threads=cfg.n_threads,
                    flash_attn=cfg.flash_attn,
                ),
            )
            self.n_ctx = self.ctx.n_ctx
            self.batch = Batch(cfg.n_batch)
        except BaseException as exc:  # reported to start()
            self._started(exc)
            return
        self._started()
        try:
            while not self._stopping:
                self._step()
                self.outbox.flush()
        finally:
            for s in list(self.sessions.values()):
                if s.generation is not None:
                    self.finish(s, "cancelled", error=JugglerError("the backend is shutting down"))
            self.outbox.flush()
            self.batch.close()
            self.ctx.close()

    def _has_work(self) -> bool:
        if self._stalled:
            return False
        return bool(self.waiting) or any(
            s.generation is not None or len(s.pending) > 1 or (s.needs_logits and s.pending)
            for s in self.sessions.values()
        )

    def _only_eager_work(self) -> bool:
        """Only appended input waits, none of it ending in a speculative header (which
        is worth prefilling at once: its logits are kept for the generate)."""
        return not self.waiting and not any(s.needs_logits for s in self.sessions.values())

    def _step(self) -> None:
        assert self.ctx is not None and self.batch is not None
        # 1. commands. Idle: block. When only appended input waits to be prefilled, wait a
        # moment for more: a generate usually follows at once, and one decode does both.
        timeout: float | None = None if self._has_work() else IDLE_WAIT_S
        while True:
            if timeout:  # about to block: never sleep on undelivered replies
                self.outbox.flush()
            try:
                cmd = self._inbox.get(timeout=timeout) if timeout else self._inbox.get_nowait()
            except queue.Empty:
                if not self._grace_used and self._has_work() and self._only_eager_work():
                    self._grace_used = True
                    timeout = EAGER_PREFILL_GRACE_S
                    continue
                if timeout == IDLE_WAIT_S and not self._has_work():
                    self._park_cached()
                    self._compact()
                break
            timeout = None
            self._grace_used = False
            self._stalled = False
            self._dispatch(cmd)
            if self._stopping:
                return
        self.outbox.flush()
        self._tick += 1
        # 2. cancellations
        for s in list(self.sessions.values()):
            if s.generation is not None and s.generation.sink.is_cancelled:
                self.finish(s, "cancelled")
        # 3. admission
        self._admit_waiting()
        # 4. room
        work = [
            batching.SeqWork(s.seq_id, len(s.pending), s.needs_logits)
            for s in sorted(self.sessions.values(), key=lambda s: s.seq_id)
            if s.state is not SessionState.CACHED and s.pending
        ]
        demand = min(sum(batching.schedulable(w) for w in work), self.batch.capacity)
        free = self.n_ctx - self.kv_used()
        if demand > free:
            for key in choose_evictions(self._cached(), demand - free):
                self.forget_cached(key)
                self.ctx_seq_clear(key)
            free = self.n_ctx - self.kv_used()
        # 5. plan
        plan = batching.schedule(
            work,
            max_tokens=self.batch.capacity,
            max_prefill_chunk=self.config.max_prefill_chunk,
            free_cells=free,
            start=self._tick,
        )
        if plan.is_empty:
            self._on_stalled(plan.deferred)
            self._publish()
            return
        # 6. decode
        by_seq = {s.seq_id: s for s in self.sessions.values()}
        rows = self._fill(plan, by_seq)
        self.outbox.flush()  # admissions answered now, not after the decode
        t0 = time.perf_counter()
        rc = self.ctx.decode(self.batch)
        self._num_decodes += 1
        self._decode_s += time.perf_counter() - t0
        if rc != 0:
            self._on_decode_failed(plan, by_seq, rc)
            self._publish()
            return
        # 7. post-process
        for chunk in plan.chunks:
            s = by_seq[chunk.key]
            n = chunk.num_tokens
            s.tokens.extend(s.pending[:n])
            del s.pending[:n]
            if s.generation is None or s.generation.num_generated == 0:
                s.num_prefilled += n
        for s, row in rows:
            g = s.generation
            if g is not None:
                self.on_token(s, g.sampler.sample(self.ctx, row))
            elif s.spec_header is not None:
                s.saved_logits = self.ctx.logits_row(row)
        self._publish()

    def _fill(
        self, plan: batching.BatchPlan, by_seq: dict[int, Session]
    ) -> list[tuple[Session, int]]:
        assert self.batch is not None
        self.batch.clear()
        rows: list[tuple[Session, int]] = []
        for chunk in plan.chunks:
            s = by_seq[chunk.key]
            pos = s.n_past
            last = chunk.num_tokens - 1
            for j in range(chunk.num_tokens):
                row = self.batch.add(
                    s.pending[j], pos + j, s.seq_id, chunk.wants_logits and j == last
                )
            if chunk.wants_logits:
                rows.append((s, row))
        return rows

    def _on_stalled(self, deferred: tuple[int, ...]) -> None:
        """Nothing fits in the KV cells: end the generations that wait for cells."""
        if not deferred:
            return
        self._stalled = True
        for s in list(self.sessions.values()):
            if s.seq_id in deferred and s.generation is not None:
                self.finish(
                    s,
                    "error",
                    error=ContextOverflow(
                        f"the KV cache is full ({self.kv_used()} of {self.n_ctx} cells in use "
                        f"by {len(self.sessions)} sequences); end idle sessions or raise "
                        "--ctx-size"
                    ),
                )

    def _on_decode_failed(
        self, plan: batching.BatchPlan, by_seq: dict[int, Session], rc: int
    ) -> None:
        assert self.ctx is not None
        log.error(
            "worker %d: llama_decode returned %d for %d tokens", self.worker_id, rc, plan.num_tokens
        )
        for chunk in plan.chunks:
            s = by_seq[chunk.key]
            # Undo whatever part of the batch reached the KV for this sequence.
            if not self.ctx.seq_rm(s.seq_id, s.n_past, -1):
                self.ctx.seq_rm(s.seq_id, -1, -1)
                s.pending[:0] = s.tokens
                s.tokens.clear()
            if s.generation is not None:
                self.finish(
                    s,
                    "error",
                    error=ContextOverflow(
                        f"llama_decode failed ({rc}): no room in the KV cache for this batch"
                    ),
                )

    # -- bookkeeping --------------------------------------------------------------------
    def kv_used(self) -> int:
        return sum(s.num_cells for s in self.sessions.values())

    def live_cells(self) -> int:
        """Cells that live (not cached) sequences hold or will hold for pending input."""
        return sum(
            len(s.tokens) + len(s.pending)
            for s in self.sessions.values()
            if s.state is not SessionState.CACHED
        )

    def _cached(self) -> list[CachedSeq]:
        return [
            CachedSeq(s.seq_id, tuple(s.tokens), s.last_used)
            for s in self.sessions.values()
            if s.state is SessionState.CACHED
        ]

    def forget_cached(self, seq_id: int) -> list[int]:
        """Forget a cached sequence and return its tokens; its KV stays until the caller
        removes or reuses it."""
        for sid, s in list(self.sessions.items()):
            if s.seq_id == seq_id and s.state is SessionState.CACHED:
                del self.sessions[sid]
                s.state = SessionState.CLOSED
                return s.tokens
        return []

    def ctx_seq_clear(self, seq_id: int) -> None:
        assert self.ctx is not None
        self.ctx.seq_rm(seq_id, -1, -1)

    def free_seq_ids(self) -> list[int]:
        used = {s.seq_id for s in self.sessions.values()}
        return [i for i in range(self.config.n_seq_max) if i not in used]

    def _admit_waiting(self) -> None:
        while self.waiting:
            cmd = self.waiting[0]
            reuse = choose_reuse(self._cached(), self.free_seq_ids(), cmd.prompt)
            key = reuse.key
            if key is None:
                return
            found = self.parked.best(cmd.prompt, better_than=reuse.keep)
            if found is not None:
                entry, shared = found
                keep = min(shared, len(cmd.prompt) - 1)
                reuse = Reuse(key, keep if self._unpark(entry, key) else 0)
            live = self.live_cells()
            if live + len(cmd.prompt) + 1 > self.n_ctx:
                if any(s.generation is not None for s in self.sessions.values()):
                    return  # running generations will finish and free their cells
                self.waiting.popleft()
                self.outbox.reject(
                    cmd.reply,
                    ContextOverflow(self._full_message(live, len(cmd.prompt) + 1)),
                )
                self.notify(
                    Command(
                        CommandKind.REQUEST_DONE,
                        session_id=cmd.session_id,
                        worker_id=self.worker_id,
                    )
                )
                continue
            self.waiting.popleft()
            self.admit_stateless(cmd, key, reuse.keep)

    def _publish(self) -> None:
        running = sum(1 for s in self.sessions.values() if s.generation is not None)
        self.snapshot = WorkerSnapshot(
            num_running=running,
            num_waiting=len(self.waiting),
            num_sessions=sum(1 for s in self.sessions.values() if not s.is_ephemeral),
            num_cached=sum(1 for s in self.sessions.values() if s.state is SessionState.CACHED),
            kv_used=self.kv_used(),
            kv_total=self.n_ctx,
            num_decodes=self._num_decodes,
            decode_s=self._decode_s,
            num_compactions=self._num_compactions,
            num_parked=len(self.parked.entries),
            parked_cells=self.parked.cells,
        )

    def _dispatch(self, cmd: Command) -> None:
        """Apply one command (the one place that dispatches on CommandKind)."""
        try:
            if cmd.kind is CommandKind.SHUTDOWN:
                self._stopping = True
            elif cmd.kind is CommandKind.COMPLETE:
                self.waiting.append(cmd)
            elif cmd.kind is CommandKind.CREATE_SESSION:
                self.create_session(cmd)
            elif cmd.kind is CommandKind.APPEND_INPUT:
                self.append_input(cmd)
            elif cmd.kind is CommandKind.GENERATE:
                self.start_generation(cmd)
            elif cmd.kind is CommandKind.CANCEL:
                self.cancel(cmd)
            elif cmd.kind is CommandKind.END_SESSION:
                self.end_session(cmd)
            else:
                log.warning("worker %d: unknown command %s", self.worker_id, cmd.kind)
                self.outbox.reject(cmd.reply, JugglerError(f"unknown command {cmd.kind}"))
        except JugglerError as exc:
            self.outbox.reject(cmd.reply, exc)
        except Exception as exc:
            log.exception("worker %d: command %s failed", self.worker_id, cmd.kind)
            self.outbox.reject(cmd.reply, JugglerError(f"internal error: {exc}"))

    def push_final(self, s: Session, event: StreamEvent) -> None:
        assert s.generation is not None
        s.generation.sink.finish(event)

    def error_event(self, exc: JugglerError) -> StreamEvent:
        return StreamEvent(EventKind.ERROR, error=exc)

    def now(self) -> float:
        return time.perf_counter()

    def tick(self) -> int:
        return self._tick
