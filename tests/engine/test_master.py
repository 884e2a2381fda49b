"""Pure placement and the master's bookkeeping (fake workers, no llama.cpp)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.master import Master, choose_worker
from juggler.engine.schedule.messages import (
    Cancel,
    Complete,
    CreateSession,
    Generate,
    RequestDone,
    SessionGone,
    Shutdown,
    WorkerCommand,
    WorkerDied,
)
from juggler.engine.schedule.stream import RequestStats, StreamSink
from juggler.errors import EngineDead, SessionNotFound


class FakeWorker:
    def __init__(self) -> None:
        self.got: list[WorkerCommand] = []

    def submit(self, cmd: WorkerCommand) -> None:
        self.got.append(cmd)


def future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


def complete(rid: str, keys: tuple[int, ...]) -> Complete:
    return Complete(rid, future(), (1, 2), SamplingParams(), StreamSink(), 0.0, prefix_keys=keys)


def test_least_loaded_and_on_ties_the_worker_that_took_work_last() -> None:
    """Issue 47: a lone client's requests stay on one worker (its OpenMP pool stays
    warm and is the only one counted); equal loads otherwise go to the first."""
    assert choose_worker([1, 0, 0], 0) == 1
    assert choose_worker([0, 0, 0], 1) == 1
    assert choose_worker([0, 0, 0], 2) == 2
    assert choose_worker([0, 1, 0], 1) == 0
    assert choose_worker([1, 1, 0], 0) == 2


def test_preferred_worker_unless_full() -> None:
    assert choose_worker([3, 0], 0, preferred=0, capacity=8) == 0
    assert choose_worker([8, 0], 0, preferred=0, capacity=8) == 1


def test_sessions_spread_and_stay_pinned() -> None:
    async def go() -> None:
        workers = [FakeWorker(), FakeWorker()]
        m = Master(workers)
        ids = [f"s{i}" for i in range(4)]
        for sid in ids:
            m.dispatch(CreateSession(sid, future()))
        assert [len(w.got) for w in workers] == [2, 2]
        pinned = m.sessions[ids[0]]
        m.dispatch(Generate(ids[0], future(), SamplingParams(), StreamSink(), 0.0))
        assert isinstance(workers[pinned].got[-1], Generate)
        m.dispatch(SessionGone(ids[0], pinned))
        assert ids[0] not in m.sessions
        assert sorted(m.loads) == [1, 2]

    asyncio.run(go())


def test_unknown_session_is_rejected_with_404_error() -> None:
    async def go() -> None:
        m = Master([FakeWorker()])
        reply = future()
        m.dispatch(Cancel("nope", reply))
        with pytest.raises(SessionNotFound):
            await reply

    asyncio.run(go())


def test_stateless_load_returns_and_stats_are_recorded() -> None:
    async def go() -> None:
        m = Master([FakeWorker(), FakeWorker()])
        m.dispatch(complete("a", (11, 12)))
        assert sum(m.loads) == 1
        w = m.affinity[12]
        m.dispatch(complete("b", (11, 12, 13)))
        assert m._stateless["b"] == w  # affinity beats least-loaded
        stats = RequestStats(
            input_tokens=10, output_tokens=3, prompt_tokens_prefilled=4, prompt_tokens_reused=6
        )
        m.dispatch(RequestDone("a", w, stats))
        assert sum(m.loads) == 1
        assert m.last_stats == stats
        assert m.totals.prompt_tokens_reused == 6 and m.totals.generation_tokens == 3

    asyncio.run(go())


def test_a_dead_worker_marks_the_engine_dead_and_new_requests_get_503() -> None:
    async def go() -> None:
        worker = FakeWorker()
        m = Master([worker])
        m.dispatch(WorkerDied(0, EngineDead("worker-0 failed (RuntimeError: boom)")))
        assert m.dead is not None and "boom" in m.dead.message
        reply = future()
        m.dispatch(CreateSession("s", reply))
        with pytest.raises(EngineDead, match="boom") as caught:
            await reply
        assert caught.value.status == 503
        assert worker.got == [], "nothing reaches the workers any more"

    asyncio.run(go())


def test_unknown_command_is_logged_and_rejected(caplog: pytest.LogCaptureFixture) -> None:
    m = Master([FakeWorker()])
    with caplog.at_level(logging.WARNING):
        m.dispatch(Shutdown())  # only `run()` handles Shutdown
    assert "unknown command Shutdown" in caplog.text


def test_run_stops_on_shutdown_and_survives_a_failing_command() -> None:
    async def go() -> None:
        m = Master([FakeWorker()])
        bad = Cancel("s", future())
        m.sessions["s"] = 5  # a bug: no such worker
        m.submit(bad)
        m.submit(Shutdown())
        await asyncio.wait_for(m.run(), 5)
        with pytest.raises(IndexError):
            await bad.reply

    asyncio.run(go())
