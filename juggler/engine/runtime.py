"""`Engine`: the backend's model, workers and master behind one async API for the routes.

Construction loads the model (blocking, main thread). `start()` (on the event loop)
starts the worker threads, each creating its own context, then the master task. Every
API method builds a typed `Command`, puts it on the master's ingress queue and awaits
the command's future; streaming methods return the request's `StreamSink`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from juggler.engine.cache.prefix_cache import prefix_keys
from juggler.engine.llama.chat import CHATML, ChatTemplate
from juggler.engine.llama.native import Model, supports_gpu_offload
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.master import Master
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.stream import StreamSink
from juggler.engine.worker.config import WorkerConfig, WorkerSnapshot
from juggler.engine.worker.embed import EmbedWorker
from juggler.engine.worker.worker import Worker
from juggler.errors import BadRequest, ContextOverflow
from juggler.types import ModelType

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    """The backend's settings (from the command line, see `__main__`)."""

    model_path: str
    model_name: str
    type: ModelType = ModelType.LLM
    ctx_size: int = 4096
    workers: int = 1
    parallel: int = 8
    threads: int = os.cpu_count() or 1
    n_gpu_layers: int = 0
    batch_size: int = 512
    prefill_chunk: int = 256
    stream_queue_size: int = 256
    #: "auto" (llama.cpp decides; on for CPU), "on" or "off".
    flash_attn: str = "auto"
    #: KV cells kept for finished stateless requests (prefix reuse); None: ctx_size // 8.
    cache_cells: int | None = None
    #: Tokens of cached prefixes parked in host memory by idle workers; None: ctx_size.
    parked_cells: int | None = None


class Engine:
    def __init__(self, config: EngineConfig, model: Model | None = None) -> None:
        self.config = config
        self.model = model or Model(config.model_path, n_gpu_layers=config.n_gpu_layers)
        bos = self.model.special_text(self.model.bos)
        eos = self.model.special_text(self.model.eos)
        if config.type is ModelType.LLM:
            self.template = ChatTemplate.choose(
                self.model.chat_template(), self.model.architecture, bos_token=bos, eos_token=eos
            )
        else:  # never rendered: embedding and reranking models do not chat
            self.template = ChatTemplate(CHATML, bos_token=bos, eos_token=eos, origin="none")
        self.device = "gpu" if config.n_gpu_layers > 0 and supports_gpu_offload() else "cpu"
        self.workers: list[Worker | EmbedWorker] = []
        self.master: Master | None = None
        self._task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.is_ready = False

    @property
    def is_llm(self) -> bool:
        return self.config.type is ModelType.LLM

    # -- lifecycle (event loop) --------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        cfg = self.config
        batch = max(cfg.batch_size, cfg.parallel)
        wcfg = WorkerConfig(
            n_ctx=cfg.ctx_size,
            n_batch=batch,
            n_seq_max=cfg.parallel,
            n_threads=cfg.threads,
            max_prefill_chunk=max(1, min(cfg.prefill_chunk, batch)),
            flash_attn={"auto": -1, "off": 0, "on": 1}[cfg.flash_attn],
            cache_cells=cfg.cache_cells,
            parked_cells=cfg.parked_cells,
        )

        def deliver(cmd: Command) -> None:  # runs on the loop, from a worker's outbox
            assert self.master is not None
            self.master.ingress.put_nowait(cmd)

        for i in range(cfg.workers):
            if self.is_llm:
                self.workers.append(Worker(i, self.model, wcfg, self.template, loop, deliver))
            else:
                ecfg = WorkerConfig(
                    n_ctx=min(cfg.ctx_size, self.model.n_ctx_train or cfg.ctx_size),
                    n_batch=batch,
                    n_seq_max=max(cfg.parallel, 32),
                    n_threads=cfg.threads,
                )
                self.workers.append(
                    EmbedWorker(
                        i,
                        self.model,
                        ecfg,
                        rerank=cfg.type is ModelType.RERANKING,
                        loop=loop,
                        deliver=deliver,
                    )
                )
        self.master = Master(self.workers, capacity=cfg.parallel)
        for w in self.workers:
            await asyncio.to_thread(w.start)
        self._task = asyncio.create_task(self.master.run(), name="master")
        self.is_ready = True
        log.info(
            "engine ready: %s (%s), %d worker(s) x %d sequences, ctx %d, chat template %s",
            cfg.model_name,
            cfg.type,
            cfg.workers,
            cfg.parallel,
            cfg.ctx_size,
            self.template.origin,
        )

    async def stop(self) -> None:
        self.is_ready = False
        if self.master is not None and self._task is not None:
            self.master.submit(Command(CommandKind.SHUTDOWN))
            await self._task
        for w in self.workers:
            await asyncio.to_thread(w.stop)

    # -- helpers -------------------------------------------------------------------
    async def _call(self, cmd: Command) -> Any:
        assert self.master is not None and self.loop is not None
        fut: asyncio.Future[Any] = self.loop.create_future()
        cmd.reply = fut
        self.master.submit(cmd)
        return await fut

    def new_sink(self, *, incremental: bool = True) -> StreamSink:
        return StreamSink(max_pending=self.config.stream_queue_size, incremental=incremental)

    def _require_llm(self) -> None:
        if not self.is_llm:
            raise BadRequest(
                f"model {self.config.model_name} is a {self.config.type} model; "
                "it does not generate text",
                param="model",
            )

    def tokenize_prompt(self, text: str) -> list[int]:
        bos = self.template.bos_token
        add_special = self.model.add_bos and not (bos and text.startswith(bos))
        return self.model.tokenize(text, add_special=add_special)

    def render_chat(self, messages: list[dict[str, Any]]) -> str:
        return self.template.render(messages, add_generation_prompt=True)

    # -- stateless generation ------------------------------------------------------
    async def complete(
        self,
        prompt: list[int],
        params: SamplingParams,
        t_arrival: float | None = None,
        *,
        incremental: bool = True,
    ) -> StreamSink:
        """Start a stateless generation; returns its stream once a worker accepted it.
        `incremental=False` (a non-streaming request): the text arrives all at once."""
        self._require_llm()
        if not prompt:
            raise BadRequest("the prompt is empty", param="prompt")
        if len(prompt) >= self.config.ctx_size:
            raise ContextOverflow(
                f"the prompt has {len(prompt)} tokens but the context holds "
                f"{self.config.ctx_size} (--ctx-size)"
            )
        sink = self.new_sink(incremental=incremental)
        await self._call(
            Command(
                CommandKind.COMPLETE,
                prompt=tuple(prompt),
                prefix_keys=prefix_keys(prompt),
                params=params,
                sink=sink,
                t_arrival=t_arrival or time.perf_counter(),
            )
        )
        return sink

    # -- sessions ----------------------------------------------------------------------
    async def create_session(self) -> dict[str, Any]:
        self._require_llm()
        out: dict[str, Any] = await self._call(Command(CommandKind.CREATE_SESSION))
        return out

    async def append_input(
        self,
        session_id: str,
        *,
        text: str | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = await self._call(
            Command(CommandKind.APPEND_INPUT, session_id=session_id, text=text, messages=messages)
        )
        return out

    async def generate(self, session_id: str, params: SamplingParams) -> StreamSink:
        sink = self.new_sink()
        await self._call(
            Command(
                CommandKind.GENERATE,
                session_id=session_id,
                params=params,
                sink=sink,
                t_arrival=time.perf_counter(),
            )
        )
        return sink

    async def cancel(self, session_id: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._call(Command(CommandKind.CANCEL, session_id=session_id))
        return out

    async def end_session(self, session_id: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._call(
            Command(CommandKind.END_SESSION, session_id=session_id)
        )
        return out

    # -- embeddings / reranking --------------------------------------------------------
    async def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        if self.config.type is not ModelType.EMBEDDING:
            raise BadRequest(
                f"model {self.config.model_name} is a {self.config.type} model, "
                "not an embedding model",
                param="model",
            )
        inputs = [self.model.tokenize(t, add_special=True, parse_special=False) for t in texts]
        out: list[list[float]] = await self._call(Command(CommandKind.EMBED, inputs=inputs))
        return out, sum(len(i) for i in inputs)

    async def rerank(self, query: str, documents: list[str]) -> tuple[list[float], int]:
        if self.config.type is not ModelType.RERANKING:
            raise BadRequest(
                f"model {self.config.model_name} is a {self.config.type} model, "
                "not a reranking model",
                param="model",
            )
        inputs = [self.rerank_tokens(query, doc) for doc in documents]
        out: list[list[float]] = await self._call(Command(CommandKind.RERANK, inputs=inputs))
        return [v[0] for v in out], sum(len(i) for i in inputs)

    def rerank_tokens(self, query: str, doc: str) -> list[int]:
        """llama-server's layout: the GGUF's "rerank" template if any, else
        [BOS] query [EOS] [SEP] doc [EOS] as the vocabulary asks for them."""
        m = self.model
        template = m.chat_template("rerank")
        if template:
            text = template.replace("{query}", query).replace("{document}", doc)
            return m.tokenize(text, add_special=False, parse_special=True)
        eos = m.eos if m.eos >= 0 else m.sep
        out = [m.bos] if m.add_bos else []
        out += m.tokenize(query, add_special=False, parse_special=False)
        out += [eos] if m.add_eos else []
        out += [m.sep] if m.add_sep else []
        out += m.tokenize(doc, add_special=False, parse_special=False)
        out += [eos] if m.add_eos else []
        return out

    # -- snapshots (event loop; read-only) -------------------------------------------
    def worker_snapshots(self) -> list[WorkerSnapshot]:
        return [w.snapshot for w in self.workers]
