"""`Engine`: the backend's model, workers and master behind one async API for the routes.

Construction loads the model (blocking, main thread). `start()` (on the event loop)
starts the worker threads, each creating its own context, then the master task. Every
API method creates the command's reply future and id, puts the command on the master's
ingress queue and awaits the reply; streaming methods return the request's `StreamSink`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from juggler.compute.board import reader_from_env
from juggler.engine.cache.prefix_cache import prefix_keys
from juggler.engine.embed_inputs import Inputs, embed_inputs, rerank_inputs
from juggler.engine.engine_config import EngineConfig, embed_worker_config, worker_config
from juggler.engine.llama.chat import CHATML, ChatTemplate
from juggler.engine.llama.native import Model, supports_gpu_offload
from juggler.engine.llama.ports import LlamaModel
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.media_images import load_projector
from juggler.engine.schedule.master import Master
from juggler.engine.schedule.messages import (
    Abandon,
    AdapterRef,
    AppendInput,
    Cancel,
    Complete,
    CreateSession,
    DropAdapter,
    Embed,
    EndSession,
    Generate,
    Message,
    Notice,
    Reply,
    Rerank,
    RouteCommand,
    Shutdown,
)
from juggler.engine.schedule.stream import StreamSink
from juggler.engine.threads import ThreadGovernor, governor_from
from juggler.engine.worker.config import WorkerSnapshot
from juggler.engine.worker.embed import EmbedWorker
from juggler.engine.worker.worker import Worker
from juggler.errors import BadRequest, ContextOverflow, EngineDead, LoadFailed
from juggler.types import ModelType

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        model: LlamaModel | None = None,
        governor: ThreadGovernor | None = None,
    ) -> None:
        """`model`: the loaded model (loaded from `config.model_path` when None)."""
        self.config = config
        flags = config.flags
        self.model: LlamaModel = (
            model
            if model is not None
            else Model(
                config.model_path, n_gpu_layers=flags.n_gpu_layers, use_mmap=flags.mmap == "on"
            )
        )
        bos = self.model.special_text(self.model.bos)
        eos = self.model.special_text(self.model.eos)
        if config.type is ModelType.LLM:
            self.template = ChatTemplate.choose(
                self.model.chat_template(), self.model.architecture, bos_token=bos, eos_token=eos
            )
        else:  # never rendered: embedding and reranking models do not chat
            self.template = ChatTemplate(CHATML, bos_token=bos, eos_token=eos, origin="none")
        #: The vision projector, loaded with the model (issue 51); the workers find it on
        #: the model.
        on_gpu = flags.n_gpu_layers > 0 and supports_gpu_offload()
        self.projector = load_projector(config, self.model, on_gpu=on_gpu)
        self.workers: list[Worker | EmbedWorker] = []
        #: Each worker's thread count, as the router's compute plan divides the cores.
        self.governor = governor or governor_from(flags.threads, reader_from_env())
        self.master: Master | None = None
        self._task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.is_ready = False

    def stalled_for(self) -> float:
        """The longest a worker has held work without finishing a step, in seconds."""
        now = time.monotonic()
        return max((w.stuck_for(now) for w in self.workers), default=0.0)

    @property
    def is_stalled(self) -> bool:
        """A worker holds work and has not finished a step for `--stall-timeout`."""
        return self.stalled_for() > self.config.flags.stall_timeout

    @property
    def is_llm(self) -> bool:
        return self.config.type is ModelType.LLM

    @property
    def dead(self) -> EngineDead | None:
        """Why the engine cannot serve any more (a worker died), or None. Read from the
        workers themselves, so it is true as soon as a worker's thread failed."""
        for w in self.workers:
            if w.dead is not None:
                return w.dead
        return None

    # -- lifecycle (event loop) --------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        cfg = self.config
        flags = cfg.flags

        def deliver(notice: Notice) -> None:  # runs on the loop, from a worker's outbox
            assert self.master is not None
            self.master.submit(notice)

        for i in range(cfg.num_workers):
            if self.is_llm:
                wcfg = worker_config(cfg)
                self.workers.append(
                    Worker(i, self.model, wcfg, self.template, loop, deliver, self.governor)
                )
            else:
                native = self._native_model()
                ecfg = embed_worker_config(cfg, native.n_ctx_train)
                rerank = cfg.type is ModelType.RERANKING
                self.workers.append(
                    EmbedWorker(
                        i,
                        native,
                        ecfg,
                        rerank=rerank,
                        loop=loop,
                        deliver=deliver,
                        governor=self.governor,
                    )
                )
        self.master = Master(self.workers, capacity=flags.parallel)
        for w in self.workers:
            await asyncio.to_thread(w.start)
        self._task = asyncio.create_task(self.master.run(), name="master")
        self.is_ready = True
        log.info(
            "engine ready: %s (%s), %d worker(s) x %d sequences, ctx %d, chat template %s",
            cfg.model_name,
            cfg.type,
            cfg.num_workers,
            flags.parallel,
            flags.ctx_size,
            self.template.origin,
        )

    async def stop(self) -> None:
        self.is_ready = False
        if self.master is not None and self._task is not None:
            self.master.submit(Shutdown())
            await self._task
        for w in self.workers:
            await asyncio.to_thread(w.stop)

    # -- helpers -------------------------------------------------------------------
    def _future(self) -> asyncio.Future[Any]:
        assert self.loop is not None, "start() the engine first"
        return self.loop.create_future()

    def _send(self, cmd: RouteCommand) -> None:
        assert self.master is not None, "start() the engine first"
        self.master.submit(cmd)

    def _native_model(self) -> Model:
        if not isinstance(self.model, Model):
            raise LoadFailed("embedding and reranking need a llama.cpp model")
        return self.model

    def new_sink(self, *, incremental: bool = True) -> StreamSink:
        return StreamSink(max_pending=self.config.flags.stream_queue_size, incremental=incremental)

    def require_llm(self) -> None:
        if not self.is_llm:
            raise BadRequest(
                f"model {self.config.model_name} is a {self.config.type} model; "
                "it does not generate text",
                param="model",
            )

    def _require(self, wanted: ModelType, what: str) -> None:
        if self.config.type is not wanted:
            raise BadRequest(
                f"model {self.config.model_name} is a {self.config.type} model, not {what}",
                param="model",
            )

    def tokenize_prompt(self, text: str) -> list[int]:
        bos = self.template.bos_token
        add_special = self.model.add_bos and not (bos and text.startswith(bos))
        return self.model.tokenize(text, add_special=add_special)

    def render_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        return self.template.render(messages, add_generation_prompt=True, tools=tools)

    # -- stateless generation ------------------------------------------------------
    async def complete(
        self,
        prompt: list[int],
        params: SamplingParams,
        t_arrival: float | None = None,
        *,
        incremental: bool = True,
        adapter: AdapterRef | None = None,
    ) -> StreamSink:
        """Start a stateless generation (with a LoRA adapter, if given); returns its
        stream once a worker accepted it. `incremental=False` (a non-streaming request):
        the text arrives all at once."""
        self.require_llm()
        if not prompt:
            raise BadRequest("the prompt is empty", param="prompt")
        ctx_size = self.config.flags.ctx_size
        if len(prompt) >= ctx_size:
            raise ContextOverflow(
                f"the prompt has {len(prompt)} tokens but the context holds {ctx_size} (--ctx-size)"
            )
        sink = self.new_sink(incremental=incremental)
        reply: Reply = self._future()
        self._send(
            Complete(
                uuid.uuid4().hex,
                reply,
                tuple(prompt),
                params,
                sink,
                t_arrival or time.perf_counter(),
                prefix_keys(prompt, adapter=adapter.adapter_id if adapter else None),
                adapter,
            )
        )
        try:
            await reply
        except asyncio.CancelledError:  # the caller left while it waited for a sequence
            sink.cancel()  # the worker drops it from its queue at its next tick
            raise
        return sink

    # -- sessions ----------------------------------------------------------------------
    async def create_session(self, adapter: AdapterRef | None = None) -> dict[str, Any]:
        self.require_llm()
        reply: Reply = self._future()
        self._send(CreateSession(uuid.uuid4().hex, reply, adapter))
        return await reply

    async def drop_adapter(self, adapter_id: str) -> dict[str, Any]:
        """Unload an adapter from every worker; Conflict while a request runs with it."""
        self.require_llm()
        replies: list[Reply] = []
        for i in range(len(self.workers)):
            reply: Reply = self._future()
            self._send(DropAdapter(i, adapter_id, reply))
            replies.append(reply)
        results = await asyncio.gather(*replies, return_exceptions=True)
        unloaded = False
        for r in results:
            if isinstance(r, BaseException):
                raise r
            unloaded = unloaded or bool(r["unloaded"])
        return {"adapter_id": adapter_id, "unloaded": unloaded}

    async def append_input(
        self,
        session_id: str,
        *,
        text: str | None = None,
        messages: list[Message] | None = None,
        tools: list[dict[str, Any]] | None = None,
        header_suffix: str | None = None,
    ) -> dict[str, Any]:
        reply: Reply = self._future()
        msgs = tuple(messages) if messages is not None else None
        kit = tuple(tools) if tools is not None else None
        self._send(AppendInput(session_id, reply, text, msgs, kit, header_suffix))
        return await reply

    async def generate(self, session_id: str, params: SamplingParams) -> StreamSink:
        sink = self.new_sink()
        reply: Reply = self._future()
        self._send(Generate(session_id, reply, params, sink, time.perf_counter()))
        try:
            await reply
        except asyncio.CancelledError:  # the caller left while it waited for a sequence
            sink.cancel()
            raise
        return sink

    async def cancel(self, session_id: str) -> dict[str, Any]:
        reply: Reply = self._future()
        self._send(Cancel(session_id, reply))
        return await reply

    async def end_session(self, session_id: str) -> dict[str, Any]:
        reply: Reply = self._future()
        self._send(EndSession(session_id, reply))
        return await reply

    # -- embeddings / reranking --------------------------------------------------------
    async def embed(self, items: Sequence[str | Sequence[int]]) -> tuple[list[list[float]], int]:
        """One vector per item: a text is tokenized with the model's special tokens; a
        sequence of token ids (of this model's vocabulary) is embedded exactly as given."""
        self._require(ModelType.EMBEDDING, "an embedding model")
        model = self.model
        return await self._pooled(Embed, lambda abandon: embed_inputs(model, items, abandon))

    async def rerank(self, query: str, documents: list[str]) -> tuple[list[float], int]:
        self._require(ModelType.RERANKING, "a reranking model")
        native = self._native_model()
        scores, n_tokens = await self._pooled(
            Rerank, lambda abandon: rerank_inputs(native, query, documents, abandon)
        )
        return [v[0] for v in scores], n_tokens

    async def _pooled(
        self, kind: type[Embed | Rerank], tokenize: Callable[[Abandon], Inputs]
    ) -> tuple[list[list[float]], int]:
        """Tokenize in a thread (never on the loop that streams other requests), then
        have a worker embed the inputs piece by piece; (vectors, tokens). If the caller
        is cancelled (its client left), tokenizing stops at the next input and the worker
        drops the request before its next piece (issue 52)."""
        abandon = Abandon()
        try:
            inputs = await asyncio.to_thread(tokenize, abandon)
            reply: asyncio.Future[list[list[float]]] = self._future()
            self._send(kind(uuid.uuid4().hex, reply, inputs, abandon))
            return await reply, sum(len(i) for i in inputs)
        except asyncio.CancelledError:
            abandon.set()
            raise

    # -- snapshots (event loop; read-only) -------------------------------------------
    def worker_snapshots(self) -> list[WorkerSnapshot]:
        return [w.snapshot for w in self.workers]
