"""The embedding / reranking worker: one thread owning one embeddings-mode context.

The model type decides the context (seed 000): an embedding model pools with the
model's own pooling type (mean / cls / last) and its vectors are L2-normalized; a
reranking model pools with `LLAMA_POOLING_TYPE_RANK`, so llama.cpp applies the
classification head and returns one score per sequence. Batches are non-causal, so
`n_ubatch = n_batch` and a whole batch of inputs (one sequence each) goes through one
decode. Each input must fit in the context (`context_length_exceeded` otherwise).

Runs only on its own thread; `submit()` may be called from any thread, answers arrive on
each command's future.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

from juggler.engine.llama.native import (
    POOLING_NONE,
    POOLING_RANK,
    Batch,
    Context,
    ContextParams,
    Model,
)
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.stream import RequestStats
from juggler.engine.worker.config import WorkerConfig, WorkerSnapshot
from juggler.engine.worker.owner_thread import OwnerThread
from juggler.errors import BadRequest, ContextOverflow, JugglerError

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


class EmbedWorker(OwnerThread):
    def __init__(
        self,
        worker_id: int,
        model: Model,
        config: WorkerConfig,
        *,
        rerank: bool,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Command], None],
    ) -> None:
        super().__init__("embed", worker_id, model, config, loop, deliver)
        self.rerank = rerank

    # -- worker thread -------------------------------------------------------------
    def _run(self) -> None:
        cfg = self.config
        try:
            ctx = Context(
                self.model,
                ContextParams(
                    n_ctx=cfg.n_ctx,
                    n_batch=cfg.n_ctx,
                    n_ubatch=cfg.n_ctx,
                    n_seq_max=cfg.n_seq_max,
                    n_threads=cfg.n_threads,
                    embeddings=True,
                    pooling=POOLING_RANK if self.rerank else -1,
                    kv_unified=True,
                ),
            )
            if ctx.pooling == POOLING_NONE:
                ctx.close()
                raise JugglerError("the model has no pooling type; it cannot serve embeddings")
            self.n_ctx = ctx.n_ctx
            batch = Batch(ctx.n_batch)
        except BaseException as exc:
            self._started(exc)
            return
        self._started()
        try:
            while True:
                self.outbox.flush()
                cmd = self._inbox.get()
                if cmd.kind is CommandKind.SHUTDOWN:
                    return
                if cmd.kind not in (CommandKind.EMBED, CommandKind.RERANK):
                    log.warning("embed worker: unknown command %s", cmd.kind)
                    self.outbox.reject(
                        cmd.reply,
                        BadRequest("this backend serves embeddings / reranking only"),
                    )
                    continue
                self.snapshot = WorkerSnapshot(num_running=1, kv_total=self.n_ctx)
                try:
                    out = self._embed(ctx, batch, cmd.inputs)
                    self.outbox.resolve(cmd.reply, out)
                except JugglerError as exc:
                    self.outbox.reject(cmd.reply, exc)
                except Exception as exc:
                    log.exception("embed worker failed")
                    self.outbox.reject(cmd.reply, JugglerError(f"internal error: {exc}"))
                self.snapshot = WorkerSnapshot(kv_total=self.n_ctx)
                n_in = sum(len(t) for t in cmd.inputs)
                self.notify(
                    Command(
                        CommandKind.REQUEST_DONE,
                        session_id=cmd.session_id,
                        worker_id=self.worker_id,
                        stats=RequestStats(input_tokens=n_in, prompt_tokens_prefilled=n_in),
                    )
                )
        finally:
            self.outbox.flush()
            batch.close()
            ctx.close()

    def _embed(self, ctx: Context, batch: Batch, inputs: list[list[int]]) -> list[list[float]]:
        for i, toks in enumerate(inputs):
            if not toks:
                raise BadRequest(f"input {i} is empty", param="input")
            if len(toks) > ctx.n_batch:
                raise ContextOverflow(
                    f"input {i} has {len(toks)} tokens; this model takes at most {ctx.n_batch}"
                )
        width = max(1, self.model.n_cls_out) if self.rerank else self.model.n_embd
        out: list[list[float]] = [[] for _ in inputs]
        groups = group_inputs(
            [len(t) for t in inputs], max_seqs=ctx.n_seq_max, max_tokens=ctx.n_batch
        )
        for group in groups:
            batch.clear()
            for seq, idx in enumerate(group):
                for pos, tok in enumerate(inputs[idx]):
                    batch.add(tok, pos, seq, True)
            rc = ctx.decode(batch)
            if rc != 0:
                raise JugglerError(f"llama_decode failed ({rc}) on an embedding batch")
            for seq, idx in enumerate(group):
                vec = ctx.embeddings_seq(seq, width)
                out[idx] = vec if self.rerank else l2_normalize(vec)
                ctx.seq_rm(seq, -1, -1)
        return out
