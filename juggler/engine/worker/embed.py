"""The embedding / reranking worker: one thread owning one embeddings-mode context.

The model type decides the context (seed 000): an embedding model pools with the
model's own pooling type (mean / cls / last) and its vectors are L2-normalized; a
reranking model pools with `LLAMA_POOLING_TYPE_RANK`, so llama.cpp applies the
classification head and returns one score per sequence. Batches are non-causal, so
`n_ubatch = n_batch` and a whole batch of inputs (one sequence each) goes through one
decode. Each input must fit in the context (`context_length_exceeded` otherwise).

Runs only on its own thread; `submit()` may be called from any thread, answers arrive on
each command's future. It works on llama.cpp's native objects directly: pooled
embeddings are not part of the generation workers' ports.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence

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
from juggler.engine.worker.owner_thread import OwnerThread
from juggler.errors import BadRequest, ContextOverflow, EngineDead, EngineError, JugglerError

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
        self._current: Embed | Rerank | None = None

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
        self.snapshot = WorkerSnapshot(kv_total=self.ctx.n_ctx)

    def serve(self) -> None:
        while True:
            self.outbox.flush()
            cmd = self._inbox.get()
            match cmd:
                case Shutdown():
                    return
                case Embed() | Rerank():
                    self._handle(cmd)
                case _:
                    log.warning("embed worker: unknown command %s", type(cmd).__name__)
                    self.outbox.reject(
                        reply_of(cmd), BadRequest("this backend serves embeddings / reranking only")
                    )

    def _handle(self, cmd: Embed | Rerank) -> None:
        self._current = cmd
        self.progress_at = time.monotonic()
        self.holds_work = True
        n_ctx = self.ctx.n_ctx
        self.snapshot = WorkerSnapshot(num_running=1, kv_total=n_ctx)
        try:
            self.outbox.resolve(cmd.reply, self._embed(cmd.inputs))
        except JugglerError as exc:
            self.outbox.reject(cmd.reply, exc)
        except Exception as exc:
            log.exception("embed worker failed")
            self.outbox.reject(cmd.reply, JugglerError(f"internal error: {exc}"))
        self._current = None
        self.holds_work = False
        self.snapshot = WorkerSnapshot(kv_total=n_ctx)
        n_in = sum(len(t) for t in cmd.inputs)
        stats = RequestStats(input_tokens=n_in, prompt_tokens_prefilled=n_in)
        self.notify(RequestDone(cmd.request_id, self.worker_id, stats))

    def close(self) -> None:
        self.outbox.flush()
        self.batch.close()
        self.ctx.close()

    def fail_all(self, error: EngineDead) -> None:
        if self._current is not None:
            self.outbox.reject(self._current.reply, error)

    def _embed(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        ctx, batch = self.ctx, self.batch
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
            if self.governor is not None:
                ctx.set_threads(self.governor.threads_for(self.worker_id))
            rc = ctx.decode(batch)
            self.progress_at = time.monotonic()
            if rc != 0:
                raise EngineError(f"llama_decode failed ({rc}) on an embedding batch")
            for seq, idx in enumerate(group):
                vec = ctx.embeddings_seq(seq, width)
                out[idx] = vec if self.rerank else l2_normalize(vec)
                ctx.seq_rm(seq, -1, -1)
        return out
