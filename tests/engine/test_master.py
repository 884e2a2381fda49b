"""Pure placement and the master's bookkeeping (fake workers, no llama.cpp)."""

from __future__ import annotations

import asyncio

import pytest

from juggler.engine.schedule.master import Master, choose_worker
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.stream import RequestStats
from juggler.errors import SessionNotFound


class FakeWorker:
    def __init__(self) -> None:
        self.got: list[Command] = []

    def submit(self, cmd: Command) -> None:
        self.got.append(cmd)


def test_least_loaded_with_round_robin_on_ties() -> None:
    assert choose_worker([1, 0, 0], 0) == 1
    assert choose_worker([0, 0, 0], 1) == 1
    assert choose_worker([0, 0, 0], 2) == 2
    assert choose_worker([0, 1, 0], 1) == 2


def test_preferred_worker_unless_full() -> None:
    assert choose_worker([3, 0], 0, preferred=0, capacity=8) == 0
    assert choose_worker([8, 0], 0, preferred=0, capacity=8) == 1


def test_sessions_spread_and_stay_pinned() -> None:
    workers = [FakeWorker(), FakeWorker()]
    m = Master(workers)
    ids = []
    for _ in range(4):
        cmd = Command(CommandKind.CREATE_SESSION)
        m.dispatch(cmd)
        assert cmd.session_id is not None
        ids.append(cmd.session_id)
    assert [len(w.got) for w in workers] == [2, 2]
    pinned = m.sessions[ids[0]]
    m.dispatch(Command(CommandKind.GENERATE, session_id=ids[0]))
    assert workers[pinned].got[-1].kind is CommandKind.GENERATE
    m.dispatch(Command(CommandKind.SESSION_GONE, session_id=ids[0], worker_id=pinned))
    assert ids[0] not in m.sessions
    assert sorted(m.loads) == [1, 2]


def test_unknown_session_is_rejected_with_404_error() -> None:
    async def go() -> None:
        m = Master([FakeWorker()])
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        m.dispatch(Command(CommandKind.CANCEL, session_id="nope", reply=fut))
        with pytest.raises(SessionNotFound):
            await fut

    asyncio.run(go())


def test_stateless_load_returns_and_stats_are_recorded() -> None:
    m = Master([FakeWorker(), FakeWorker()])
    cmd = Command(CommandKind.COMPLETE, prompt=(1, 2), prefix_keys=(11, 12))
    m.dispatch(cmd)
    assert sum(m.loads) == 1
    w = m.affinity[12]
    follow = Command(CommandKind.COMPLETE, prompt=(1, 2, 3), prefix_keys=(11, 12, 13))
    m.dispatch(follow)
    assert m._stateless[follow.session_id or ""] == w  # affinity beats least-loaded
    stats = RequestStats(
        input_tokens=10, output_tokens=3, prompt_tokens_prefilled=4, prompt_tokens_reused=6
    )
    m.dispatch(Command(CommandKind.REQUEST_DONE, session_id=cmd.session_id, stats=stats))
    assert sum(m.loads) == 1
    assert m.last_stats == stats
    assert m.totals.prompt_tokens_reused == 6 and m.totals.generation_tokens == 3
