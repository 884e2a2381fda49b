"""The embedding / reranking worker: one thread owning one embeddings-mode context.

The model type decides the context (seed 000): an embedding model pools with the
model's own pooling type (mean / cls / last) and its vectors are L2-normalized; a
reranking model pools with `LLAMA_POOLING_TYPE_RANK`, so llama.cpp applies the
classification head and returns one score per sequence. Batches are non-causal, so
`n_ubatch = n_batch` and a whole batch of inputs (one sequence each) goes through one
decode. Each input must fit in the context (`context_length_exceeded` otherwise).

Issue 52: a request is worked through in pieces, one decode of at most a context's
worth of its inputs (`group_inputs`), and the requests the worker holds take turns, one
piece each (`EmbedJob`s in a round-robin queue). A request of one piece goes ahead of
the longer ones (behind the other one-piece requests): a one-word embedding waits for
the piece that is running and the short requests before it, however many large ones
there are; a large one waits only while short ones keep coming. A request whose caller
left (its `Abandon` set by the engine) is dropped before its next piece.

Runs only on its own thread; `submit()` may be called from any thread, answers arrive on
each command's future. It works on llama.cpp's native objects directly: pooled
embeddings are not part of the generation workers' ports.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from juggler.engine.llama.native import Model
from juggler.engine.llama.native_context import POOLING_NONE, POOLING_RANK, Batch, Context
from juggler.engine.llama.ports import ContextParams
from juggler.engine.schedule.messages import (
    Embed,
    Notice,
    RequestDone,
    Rerank,
    Shutdown,
    reply_of,
)
from juggler.engine.schedule.stream import RequestStats
from juggler.engine.threads import ThreadGovernor
from juggler.engine.worker.config import WorkerConfig, WorkerSnapshot
from juggler.engine.worker.context_slot import device_buffers
from juggler.engine.worker.owner_thread import OwnerThread
from juggler.errors import (
    BadRequest,
    ContextOverflow,
    EngineDead,
    EngineError,
    JugglerError,
    TooManyRequests,
)

log = logging.getLogger(__name__)


def l2_normalize(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm > 0 else vec


def group_inputs(lengths: list[int], *, max_seqs: int, max_tokens: int) -> list[list[int]]:
    """Pure: split input indices into consecutive groups that fit one decode."""
    groups: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if cur and (len(cur) >= max_seqs or used + n > max_tokens):
            groups.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        groups.append(cur)
    return groups


def rerank_tokens(model: Model, query: str, doc: str) -> list[int]:
    """llama-server's layout: the GGUF's "rerank" template if any, else
    [BOS] query [EOS] [SEP] doc [EOS] as the vocabulary asks for them."""
    template = model.chat_template("rerank")
    if template:
        text = template.replace("{query}", query).replace("{document}", doc)
        return model.tokenize(text, add_special=False, parse_special=True)
    eos = model.eos if model.eos >= 0 else model.sep
    out = [model.bos] if model.add_bos else []
    out += model.tokenize(query, add_special=False, parse_special=False)
    out += [eos] if model.add_eos else []
    out += [model.sep] if model.add_sep else []
    out += model.tokenize(doc, add_special=False, parse_special=False)
    out += [eos] if model.add_eos else []
    return out


@dataclass(eq=False)
class EmbedJob:
    """One embedding or rerank request on its worker: its pieces (groups of inputs that
    fit one decode, in order) and the vectors computed so far."""

    cmd: Embed | Rerank
    groups: list[list[int]]
    out: list[list[float]] = field(default_factory=list)
    num_done: int = 0
    num_tokens: int = 0

    @property
    def is_done(self) -> bool:
        return self.num_done >= len(self.groups)


class EmbedWorker(OwnerThread):
    ctx: Context
    batch: Batch

    def __init__(
        self,
        worker_id: int,
        model: Model,
        config: WorkerConfig,
        *,
        rerank: bool,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Notice], None],
        governor: ThreadGovernor | None = None,
    ) -> None:
        super().__init__("embed", worker_id, loop, deliver, kv_total=config.n_ctx)
        self.governor = governor
        self.model = model
        self.config = config
        self.rerank = rerank
        #: The requests it holds, in turn order: the front one runs the next piece.
        self._jobs: collections.deque[EmbedJob] = collections.deque()
        #: Pieces decoded so far (/stats `decode_calls_total`: tests see work stop).
        self.num_pieces = 0

    # -- worker thread -------------------------------------------------------------
    def open(self) -> None:
        cfg = self.config
        self.ctx = self.model.new_context(
            ContextParams(
                n_ctx=cfg.n_ctx,
                n_batch=cfg.n_ctx,
                n_ubatch=cfg.n_ctx,
                n_seq_max=cfg.n_seq_max,
                n_threads=cfg.n_threads,
                n_threads_batch=cfg.n_threads_batch,
                embeddings=True,
                pooling=POOLING_RANK if self.rerank else -1,
                kv_unified=True,
                flash_attn=cfg.flash_attn,
                type_k=cfg.type_k,
                type_v=cfg.type_v,
            ),
        )
        if self.ctx.pooling == POOLING_NONE:
            self.ctx.close()
            raise JugglerError("the model has no pooling type; it cannot serve embeddings")
        self.batch = self.model.new_batch(self.ctx.n_batch)
        self._devices = device_buffers(self.ctx)
        self.snapshot = WorkerSnapshot(kv_total=self.ctx.n_ctx, context_devices=self._devices)

    def serve(self) -> None:
        """Each turn: (1) hand the loop what is ready, (2) take every command waiting
        (wait for one when idle), (3) drop the requests whose caller left, (4) run one
        piece of the front request and send it to the back of the queue."""
        while True:
            self.outbox.flush()  # 1.
            if not self._take(block=not self._jobs):  # 2.
                return
            self._drop_abandoned()  # 3.
            if self._jobs:
                self._step()  # 4.
            self.holds_work = bool(self._jobs)
            self.snapshot = WorkerSnapshot(
                num_running=len(self._jobs),
                kv_total=self.ctx.n_ctx,
                num_decodes=self.num_pieces,
                context_devices=self._devices,
            )

    def _take(self, *, block: bool) -> bool:
        """Admit every command in the inbox; False once `Shutdown` came."""
        while True:
            try:
                cmd = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            match cmd:
                case Shutdown():
                    return False
                case Embed() | Rerank():
                    self._admit(cmd)
                case _:
                    log.warning("embed worker: unknown command %s", type(cmd).__name__)
                    self.outbox.reject(
                        reply_of(cmd), BadRequest("this backend serves embeddings / reranking only")
                    )

    def _admit(self, cmd: Embed | Rerank) -> None:
        """Check every input fits one decode (all before any work), then queue the job."""
        n_batch = self.ctx.n_batch
        if len(self._jobs) >= self.config.max_waiting:
            why: JugglerError = TooManyRequests(f"{len(self._jobs)} embedding requests are queued")
            return self._refuse(cmd, why)
        for i, toks in enumerate(cmd.inputs):
            if not toks:
                return self._refuse(cmd, BadRequest(f"input {i} is empty", param="input"))
            if len(toks) > n_batch:
                why = ContextOverflow(
                    f"input {i} has {len(toks)} tokens; this model takes at most {n_batch}"
                )
                return self._refuse(cmd, why)
        groups = group_inputs(
            [len(t) for t in cmd.inputs], max_seqs=self.ctx.n_seq_max, max_tokens=n_batch
        )
        job = EmbedJob(cmd, groups, out=[[] for _ in cmd.inputs])
        if len(groups) == 1:  # one piece: after the other one-piece jobs, before the rest
            at = next((i for i, j in enumerate(self._jobs) if len(j.groups) > 1), len(self._jobs))
            self._jobs.insert(at, job)
        else:
            self._jobs.append(job)
        self.progress_at = time.monotonic()
        return None

    def _refuse(self, cmd: Embed | Rerank, error: JugglerError) -> None:
        self.outbox.reject(cmd.reply, error)
        self._done(EmbedJob(cmd, []))  # the master counts it done

    def _drop_abandoned(self) -> None:
        if any(j.cmd.abandon.is_set for j in self._jobs):
            for job in [j for j in self._jobs if j.cmd.abandon.is_set]:
                self._jobs.remove(job)
                self.outbox.reject(job.cmd.reply, BadRequest("the client left"))
                self._done(job)

    def _step(self) -> None:
        job = self._jobs.popleft()
        try:
            self._piece(job)
        except JugglerError as exc:
            self.outbox.reject(job.cmd.reply, exc)
            self._done(job)
            return
        except Exception as exc:
            log.exception("embed worker failed")
            self.outbox.reject(job.cmd.reply, JugglerError(f"internal error: {exc}"))
            self._done(job)
            return
        if job.is_done:
            self.outbox.resolve(job.cmd.reply, job.out)
            self._done(job)
        else:
            self._jobs.append(job)  # its next piece after one of every other request

    def _done(self, job: EmbedJob) -> None:
        stats = RequestStats(input_tokens=job.num_tokens, prompt_tokens_prefilled=job.num_tokens)
        self.notify(RequestDone(job.cmd.request_id, self.worker_id, stats))

    def close(self) -> None:
        stopping = EngineDead("the backend is stopping")
        for job in self._jobs:
            self.outbox.reject(job.cmd.reply, stopping)
        self._jobs.clear()
        self.outbox.flush()
        self.batch.close()
        self.ctx.close()

    def fail_all(self, error: EngineDead) -> None:
        for job in self._jobs:
            self.outbox.reject(job.cmd.reply, error)
        self._jobs.clear()

    def _piece(self, job: EmbedJob) -> None:
        """Decode the job's next group of inputs (one llama_decode) and keep its vectors."""
        ctx, batch = self.ctx, self.batch
        inputs = job.cmd.inputs
        group = job.groups[job.num_done]
        width = max(1, self.model.n_cls_out) if self.rerank else self.model.n_embd
        batch.clear()
        for seq, idx in enumerate(group):
            for pos, tok in enumerate(inputs[idx]):
                batch.add(tok, pos, seq, True)
        if self.governor is not None:
            ctx.set_threads(self.governor.threads_for(self.worker_id))
        rc = ctx.decode(batch)
        self.progress_at = time.monotonic()
        self.num_pieces += 1
        try:
            if rc != 0:
                raise EngineError(f"llama_decode failed ({rc}) on an embedding batch")
            for seq, idx in enumerate(group):
                vec = ctx.embeddings_seq(seq, width)
                job.out[idx] = vec if self.rerank else l2_normalize(vec)
                job.num_tokens += len(inputs[idx])
        finally:
            for seq in range(len(group)):
                ctx.seq_rm(seq, -1, -1)
        job.num_done += 1
