"""Steps 2 to 7 of a worker's tick: from its sessions' pending work to one decode and
the tokens it samples (the numbered steps are the worker loop's, see `worker`).

`Decoder` runs on the worker thread and owns the batch and the decode counters. The
plan is `schedule.batch.schedule()`'s (pure); here it is carried out: the batch rows
are filled in plan order and the rows that want logits are remembered with their owner
(`_fill`), so each sampled token goes to the session whose row produced it.

LoRA (seed 004): work runs only once its adapter is loaded (`AdapterSet`); a plan that
spans several adapters is decoded once per adapter (`schedule.batch.group_by_adapter`),
each decode with its adapter applied. One of 64 rows or more is decoded in two, the
rows that choose a token last (`schedule.batch.exact_decodes`).
"""

from __future__ import annotations

import enum
import logging
import time

from juggler.engine.llama.ports import TokenBatch
from juggler.engine.schedule import batch as batching
from juggler.engine.schedule.batch import Chunk
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.worker.adapters import AdapterSet, busy_adapters
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.media_feed import MediaFeed
from juggler.engine.worker.session import Session, SessionState
from juggler.engine.worker.session_api import SessionApi
from juggler.engine.worker.table import SessionTable
from juggler.errors import ContextOverflow, EngineError, JugglerError

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    DECODED = "decoded"
    #: Nothing to decode.
    IDLE = "idle"
    #: Work waits but nothing fits in the KV cells: no decode until a command comes.
    STALLED = "stalled"
    #: Nothing fitted, and the generation holding the most cells was ended: its cells
    #: are now cached, so the next tick plans again.
    FREED = "freed"
    FAILED = "failed"


class Decoder:
    def __init__(
        self,
        ctx: ContextSlot,
        batch: TokenBatch,
        table: SessionTable,
        kv: KvBook,
        gens: Generations,
        api: SessionApi,
        outbox: Outbox,
        adapters: AdapterSet,
        *,
        max_prefill_chunk: int,
        worker_id: int = 0,
    ) -> None:
        self.ctx = ctx
        self.batch = batch
        self.table = table
        self.kv = kv
        self.gens = gens
        self.api = api
        self.outbox = outbox
        self.adapters = adapters
        self.max_prefill_chunk = max_prefill_chunk
        self.worker_id = worker_id
        self.num_decodes = 0
        self.decode_s = 0.0
        #: The most sequences one decode has held (issue 48: streams that run together).
        self.max_batch_seqs = 0
        #: The session the last tick decoded alone, one token and its drafts, while
        #: nothing else had work: until a command comes (`Worker.dispatch` clears it),
        #: the next tick decodes it again without planning (`run_lone`).
        self.lone: Session | None = None
        #: The worker's images, when the model has a projector (issue 51).
        self.media: MediaFeed | None = None

    def run(self, tick: int) -> Outcome:
        """One tick after the commands: cancellations, admission, room, plan, decode,
        post-process (`tick` rotates the plan's round-robin)."""
        self.lone = None
        # 2. cancellations
        for s in list(self.table.values()):
            if s.generation is not None and s.generation.sink.is_cancelled:
                self.gens.finish(s, "cancelled")
        # 3. admission
        self.api.admit_waiting()
        # 4. room
        busy = [
            s
            for s in sorted(self.table.values(), key=lambda s: s.seq_id)
            if s.state is not SessionState.CACHED and s.pending and s.has_seq
        ]
        if self.media is not None:
            self.media.others_busy = len(busy) > 1 or bool(self.api.waiting)
        work = [self._work(s) for s in busy if self._adapter_ready(s) and self._fed(s)]
        demand = min(sum(batching.schedulable(w) for w in work), self.batch.capacity)
        free = self.kv.make_room(demand)
        # 5. plan
        plan = batching.schedule(
            work,
            max_tokens=self.batch.capacity,
            max_prefill_chunk=self.max_prefill_chunk,
            free_cells=free,
            start=tick,
        )
        if plan.is_empty:
            return self._on_stalled(plan.deferred)
        # 6. decode, one decode per adapter the plan's sequences run with
        by_seq = self.table.by_seq()
        self.outbox.flush()  # admissions answered now, not after the decode
        adapter_of = {k: s.adapter_id for k, s in by_seq.items()}
        for _, chunks in batching.group_by_adapter(plan.chunks, adapter_of):
            self.adapters.apply(by_seq[chunks[0].key].adapter)
            for part in batching.exact_decodes(chunks):
                if not self._decode(part, by_seq):
                    return Outcome.FAILED
        if self.media is not None and self.media.encoding:
            self.media.decodes_beside += 1  # other streams went on while one was encoded
        api = self.api
        if len(busy) == 1 and len(plan.chunks) == 1 and not api.waiting and not api.pending:
            chunk = plan.chunks[0]
            if chunk.wants_logits and chunk.num_logits == chunk.num_tokens:
                self.lone = busy[0]
        return Outcome.DECODED

    def lone_ready(self) -> Session | None:
        """The lone stream (`lone`) when its next tick is again one chunk, its token and
        drafts, that fits; None when that no longer holds: then `run` plans the tick."""
        s, self.lone = self.lone, None
        if s is None or not s.has_seq:
            return None
        g = s.generation
        n = len(s.pending)
        if g is None or g.sink.is_cancelled or n - s.num_draft != 1 or n > self.batch.capacity:
            return None
        return s if self.kv.make_room(n) >= n else None

    def run_lone(self, s: Session) -> None:
        """The tick of a lone stream (`lone_ready`): its token and drafts decoded and
        sampled as `run` would, without the planning that would only find the same chunk
        again (a tenth of a token's host time on 2 cores, issue 23)."""
        n = len(s.pending)
        if self._decode((Chunk(s.seq_id, n, True, n),), {s.seq_id: s}):
            self.lone = s  # the context still runs with its adapter: nothing else ran

    def _fed(self, s: Session) -> bool:
        """The images at the front of `s`'s input are decoded (`media_feed`)."""
        if self.media is None or not s.pending or s.pending[0] >= 0:
            return True
        self.adapters.apply(s.adapter)
        return self.media.feed(s) and bool(s.pending)

    def _work(self, s: Session) -> batching.SeqWork:
        if self.media is not None:
            return self.media.work(s)
        return batching.SeqWork(s.seq_id, len(s.pending), s.needs_logits, s.num_draft)

    def _adapter_ready(self, s: Session) -> bool:
        """Whether `s` may decode now: no adapter, or its adapter is (or gets) loaded."""
        if self.adapters.is_loaded(s.adapter):
            return True
        try:
            return self.adapters.load(s.adapter, busy_adapters(self.table.values()))
        except JugglerError as exc:  # the adapter file no longer loads
            if s.generation is not None:
                self.gens.finish(s, "error", error=exc)
            return False

    def _decode(self, chunks: tuple[Chunk, ...], by_seq: dict[int, Session]) -> bool:
        """Fill the batch with `chunks`, decode, and post-process; False if it failed."""
        rows = self._fill(chunks, by_seq)
        t0 = time.perf_counter()
        streamed = self.ctx.tuner is not None and _streams(chunks, by_seq)  # tuner's only
        rc = self.ctx.decode(self.batch, streamed=streamed)
        took = time.perf_counter() - t0
        self.num_decodes += 1
        self.decode_s += took
        self.max_batch_seqs = max(self.max_batch_seqs, len(chunks))
        if rc == 0 and not self.ctx.last_trial:
            # Only decoding rows (no prompt prefill), run with the thread count chosen
            # (not one tried, `ThreadTuner.trial`): what sizes the next drafts, in that
            # count's table (`Drafting.use_threads`), by the cells its rows attend to
            # (`n_past` is still what it was before the decode).
            self.gens.use_threads(self.ctx.last_threads)
            n_rows, cells = 0, 0
            for c in chunks:
                if not c.wants_logits or c.num_logits != c.num_tokens:
                    break
                n_rows += c.num_tokens
                cells += c.num_tokens * by_seq[c.key].n_past
            else:
                self.gens.cost.update(n_rows, took, cells / n_rows)
        if rc != 0:
            self._on_decode_failed(chunks, by_seq, rc)
            return False
        # 7. post-process
        num_rows = sum(c.num_tokens for c in chunks)
        drafts: dict[int, list[int]] = {}
        for chunk in chunks:
            s = by_seq[chunk.key]
            n = chunk.num_tokens
            s.tokens.extend(s.pending[:n])
            del s.pending[:n]
            num_drafts = chunk.num_logits - 1 if chunk.wants_logits else 0
            if s.num_draft and chunk.wants_logits:
                # Decoded: the token (or the prompt's last) and the drafts that fit; the
                # rest go.
                drafts[s.seq_id] = s.tokens[len(s.tokens) - num_drafts :] if num_drafts else []
                s.pending.clear()
                s.num_draft = 0
            if s.generation is None or s.generation.num_generated == 0:
                s.num_prefilled += n - num_drafts
        gens = self.gens
        counted = len(rows) > 1
        if counted:
            gens.count_next_rows()
        try:
            for s, row in rows:
                try:
                    if s.generation is not None:
                        gens.on_rows(
                            s, row, drafts.get(s.seq_id, []), self.ctx.logits_row, num_rows
                        )
                    elif s.spec_header is not None:
                        s.saved_logits = self.ctx.logits_row(row)
                except EngineError as exc:  # one request's llama.cpp call failed
                    gens.finish(s, "error", error=exc)
                if counted:
                    gens.handled(s)
        finally:
            if counted:
                gens.forget_next_rows()
        return True

    def _fill(
        self, chunks: tuple[Chunk, ...], by_seq: dict[int, Session]
    ) -> list[tuple[Session, int]]:
        """Fill the batch with the chunks; returns each owner's first logit row (a chunk
        with drafts has a logit row for its token and each draft, in order)."""
        batch = self.batch
        batch.clear()
        rows: list[tuple[Session, int]] = []
        for chunk in chunks:
            s = by_seq[chunk.key]
            pos = s.n_past
            first = chunk.num_tokens - chunk.num_logits if chunk.wants_logits else chunk.num_tokens
            for j in range(chunk.num_tokens):
                row = batch.add(s.pending[j], pos + j, s.seq_id, j >= first)
                if j == first:
                    rows.append((s, row))
        return rows

    def _on_stalled(self, deferred: tuple[int, ...]) -> Outcome:
        """Nothing fits in the KV cells: end the waiting generation that holds the most
        cells. Only that one: a request that arrived as another stream reached the end
        of the context must not be ended with it (a loaded run saw that); with the
        largest one's cells cached, the others fit at the next tick."""
        if not deferred:
            return Outcome.IDLE
        waiting = [
            s for s in self.table.values() if s.seq_id in deferred and s.generation is not None
        ]
        if not waiting:
            return Outcome.STALLED
        largest = max(waiting, key=lambda s: (s.n_past, -s.seq_id))
        self.gens.finish(
            largest,
            "error",
            error=ContextOverflow(
                f"the KV cache is full ({self.kv.used()} of {self.kv.n_ctx} cells in use by "
                f"{len(self.table)} sequences); end idle sessions or raise --ctx-size"
            ),
        )
        return Outcome.FREED if len(waiting) > 1 else Outcome.STALLED

    def _on_decode_failed(
        self, chunks: tuple[Chunk, ...], by_seq: dict[int, Session], rc: int
    ) -> None:
        num_tokens = sum(c.num_tokens for c in chunks)
        log.error(
            "worker %d: llama_decode returned %d for %d tokens", self.worker_id, rc, num_tokens
        )
        for chunk in chunks:
            s = by_seq[chunk.key]
            self.kv.rollback(s, s.n_past)  # undo whatever part of the batch reached the KV
            if s.generation is not None:
                self.gens.finish(
                    s,
                    "error",
                    error=ContextOverflow(
                        f"llama_decode failed ({rc}): no room in the KV cache for this batch"
                    ),
                )


def _streams(chunks: tuple[Chunk, ...], by_seq: dict[int, Session]) -> bool:
    """Whether a decode of `chunks` serves a streamed answer (its tokens go out as they
    come: the event loop, the router and the client work beside the next decode)."""
    for c in chunks:
        g = by_seq[c.key].generation
        if g is not None and g.sink.incremental:
            return True
    return False
