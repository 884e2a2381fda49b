"""A worker thread that fails makes the engine dead: its requests end with EngineDead,
new ones are refused with it, and /health answers 503 so the manager replaces the
backend. A fake context that raises stands in for the failure."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.testclient import TestClient

from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.server import create_app
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.runtime import Engine
from juggler.engine.schedule.messages import Complete, CreateSession, WorkerDied
from juggler.engine.schedule.stream import EventKind, StreamSink
from juggler.engine.worker.config import WorkerConfig
from juggler.engine.worker.worker import Worker
from juggler.errors import EngineDead
from juggler.options import EngineFlags
from tests.engine.conftest import read_all
from tests.engine.fake_llama import BOS, FakeLlama, Faults
from tests.engine.rig import template


def test_a_worker_whose_loop_fails_ends_every_request_with_engine_dead() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        notices: list[object] = []
        config = WorkerConfig(n_ctx=256, n_batch=64, n_seq_max=1, n_threads=1)
        fake = FakeLlama(Faults(raise_on_decode=2))
        worker = Worker(0, fake, config, template(), loop, notices.append)
        await asyncio.to_thread(worker.start)
        try:
            params = SamplingParams(max_new_tokens=50, temperature=0.0)
            running, waiting = StreamSink(), StreamSink()
            admitted, queued = loop.create_future(), loop.create_future()
            worker.submit(Complete("a", admitted, (BOS, 1, 2), params, running, 0.0))
            worker.submit(Complete("b", queued, (BOS, 3), params, waiting, 0.0))
            await asyncio.wait_for(admitted, 5)
            with pytest.raises(EngineDead, match="fake decode 2 exploded"):
                await asyncio.wait_for(queued, 5)  # no free sequence: it was waiting
            events = await asyncio.wait_for(read_all(running), 5)
            assert events[-1].kind is EventKind.ERROR
            assert isinstance(events[-1].error, EngineDead)
            assert any(isinstance(n, WorkerDied) for n in notices)
            later = loop.create_future()
            worker.submit(CreateSession("s", later))
            with pytest.raises(EngineDead):
                await asyncio.wait_for(later, 5)
            assert worker.dead is not None
        finally:
            await asyncio.to_thread(worker.stop)
        assert fake.ctx.closed, "the dead worker still freed its context"

    asyncio.run(go())


def fake_engine(faults: Faults | None = None) -> Engine:
    config = EngineConfig(
        "fake.gguf", "fake", flags=EngineFlags(threads=1, ctx_size=256, parallel=2)
    )
    return Engine(config, FakeLlama(faults))


def test_health_is_503_dead_once_a_worker_died_and_requests_get_engine_dead() -> None:
    with TestClient(create_app(fake_engine(Faults(raise_on_decode=1)))) as client:
        assert client.get("/health").json()["status"] == "ok"
        r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_dead"
        health = client.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "dead" and "exploded" in health.json()["error"]
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        again = client.post("/v1/chat/completions", json=chat)
        assert again.status_code == 503 and again.json()["error"]["code"] == "engine_dead"
