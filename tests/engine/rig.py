"""A generation `Worker` on the fake llama.cpp (`fake_llama`), for the unit tests."""

from __future__ import annotations

import asyncio

from juggler.engine.llama.chat import CHATML, ChatTemplate
from juggler.engine.schedule.decode_cost import DecodeCost
from juggler.engine.schedule.messages import Notice, Reply, WorkerCommand
from juggler.engine.schedule.stream import StreamEvent, StreamSink
from juggler.engine.threads import ThreadGovernor
from juggler.engine.worker.config import WorkerConfig
from juggler.engine.worker.worker import Worker
from tests.engine.fake_llama import FakeContext, FakeLlama, Faults


class FixedCost(DecodeCost):
    """A decode cost that stays at its defaults (6 ms + 5.5 ms a row)."""

    def update(self, rows: int, seconds: float, depth: float = 0.0) -> None:
        pass


def template() -> ChatTemplate:
    return ChatTemplate(CHATML, bos_token="<s>", eos_token="</s>", origin="test")


class Rig:
    """A `Worker` on the fake, driven tick by tick on the test's own thread and loop:
    `tick()` runs one loop iteration and delivers what it sent to the event loop."""

    def __init__(
        self,
        *,
        n_ctx: int = 256,
        n_seq_max: int = 4,
        n_batch: int = 64,
        prefill_chunk: int = 32,
        cache_cells: int | None = None,
        parked_cells: int = 0,
        faults: Faults | None = None,
        max_waiting: int = 256,
        queue_timeout_s: float = 60.0,
        park_budget_bytes: int = 1 << 30,
        max_active_adapters: int = 4,
        copying: bool = False,
        stochastic: bool = False,
        speculative: bool = False,
        spec_draft_max: int = 8,
        governor: ThreadGovernor | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.fake = FakeLlama(faults, copying=copying, stochastic=stochastic)
        self.notices: list[Notice] = []
        config = WorkerConfig(
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_seq_max=n_seq_max,
            n_threads=1,
            max_prefill_chunk=prefill_chunk,
            cache_cells=cache_cells,
            parked_cells=parked_cells,
            idle_wait_s=0.0,
            eager_grace_s=0.0,
            max_waiting=max_waiting,
            queue_timeout_s=queue_timeout_s,
            park_budget_bytes=park_budget_bytes,
            max_active_adapters=max_active_adapters,
            speculative=speculative,
            spec_draft_max=spec_draft_max,
        )
        self.worker = Worker(
            0, self.fake, config, template(), self.loop, self.notices.append, governor
        )
        self.worker.open()
        # The fake decodes in microseconds: size drafts as on 2 CPU cores instead.
        self.worker.gens.cost = FixedCost()

    @property
    def ctx(self) -> FakeContext:
        return self.fake.ctx

    def reply(self) -> Reply:
        return self.loop.create_future()

    async def settle(self) -> None:
        """Let the event loop run what the worker flushed to it."""
        self.worker.outbox.flush()
        for _ in range(3):
            await asyncio.sleep(0)

    async def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.worker.step()
            await self.settle()

    async def send(self, cmd: WorkerCommand) -> None:
        """Submit a command and run one tick (which applies it)."""
        self.worker.submit(cmd)
        await self.tick()

    def sink(self, max_pending: int = 256) -> StreamSink:
        return StreamSink(max_pending=max_pending)


def events(sink: StreamSink) -> list[StreamEvent]:
    """The events a sink received so far (without waiting)."""
    return sink.taken()
