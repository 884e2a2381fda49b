"""The backend's side of the compute plan (issue 21): the thread count each worker
decodes with follows the share on its board at the next decode, divided among the
backend's busy workers; explicit threads are kept."""

from __future__ import annotations

import asyncio
from pathlib import Path

from juggler.compute.board import BoardReader, BoardWriter
from juggler.compute.plan import Share
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import Complete
from juggler.engine.threads import ACTIVE_WINDOW_S, ThreadGovernor
from tests.engine.fake_llama import BOS
from tests.engine.rig import Rig


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def governor(
    tmp: Path, share: Share, clock: FakeClock, pinned: list[tuple[int, ...]]
) -> tuple[BoardWriter, ThreadGovernor]:
    writer = BoardWriter(tmp)
    reader = BoardReader(writer.open(1, share))
    return writer, ThreadGovernor(board=reader, clock=clock, pin=pinned.append)


def test_the_share_is_divided_among_the_workers_that_are_busy(tmp_path: Path) -> None:
    clock, pinned = FakeClock(), []
    writer, gov = governor(tmp_path, Share(4, (0, 1, 2, 3), busy=True), clock, pinned)
    assert gov.threads_for(0) == 4  # alone
    # A second busy worker: half each, once worker 0's OpenMP pool of four (which
    # libgomp counts until worker 0 decodes with fewer) leaves it the cores.
    assert gov.threads_for(1) == 1
    assert gov.threads_for(0) == 2
    assert gov.threads_for(1) == 2
    clock.now += ACTIVE_WINDOW_S + 0.01
    # Worker 0 went quiet: all but the core its OpenMP pool (two threads) still holds.
    assert gov.threads_for(1) == 3
    assert pinned == [(0, 1, 2, 3)]  # moved once, when the cores were first seen
    writer.write(1, Share(1, (3,), busy=True))
    assert gov.threads_for(1) == 1
    assert pinned == [(0, 1, 2, 3), (3,)]
    assert gov.status()["workers"] == {"0": 2, "1": 1}
    writer.close_all()


def test_a_worker_that_went_idle_leaves_its_threads_to_the_busy_one(tmp_path: Path) -> None:
    """Issue 47: with two workers, one stream at a time lands on either; the worker that
    ran out of work says so, and the other decodes with every thread at once (not half
    of them for `ACTIVE_WINDOW_S`)."""
    clock, pinned = FakeClock(), []
    writer, gov = governor(tmp_path, Share(2, (0, 1), busy=True), clock, pinned)
    assert gov.threads_for(0) == 2
    assert gov.threads_for(1) == 1  # both busy
    gov.idle(0)
    assert gov.threads_for(1) == 2  # no clock moved
    gov.idle(1)
    assert gov.threads_for(0) == 1  # worker 1's idle pool holds the other core ...
    gov.idle(1)  # ... until its idle loop sees worker 0 decode and gives it back
    assert gov.threads_for(0) == 2
    writer.close_all()


def test_a_worker_going_idle_gives_back_its_openmp_pool_once_another_decodes(
    tmp_path: Path,
) -> None:
    """Issue 47: libgomp's helpers sleep after every region once its pools count more
    threads than cores (a lone SmolLM2 stream on two workers: 0.77x of one worker). An
    idle worker keeps its pool while no other worker decodes (its next request may be
    its own: giving back and starting again costs milliseconds), and gives it back once
    another does; until then the other stays within the cores that pool leaves."""
    clock, pinned, released = FakeClock(), [], []
    writer = BoardWriter(tmp_path)
    share = Share(2, (0, 1), busy=True)
    gov = ThreadGovernor(
        board=BoardReader(writer.open(1, share)),
        clock=clock,
        pin=pinned.append,
        release=lambda: released.append(1) or True,
    )
    assert gov.threads_for(0) == 2
    gov.idle(0)
    assert released == []  # nobody else decodes: worker 0 keeps its pool
    assert gov.threads_for(0) == 2  # and its next request finds it warm
    gov.idle(0)
    assert gov.threads_for(1) == 1  # alone, but worker 0's idle pool holds a core
    gov.idle(0)  # worker 0, still idle, sees worker 1 decode: gives its pool back
    assert released == [1]
    assert gov.threads_for(1) == 2  # every thread now
    gov.idle(0)
    assert released == [1]  # once: it holds no pool since
    assert gov.threads_for(0) == 1  # both busy: one each (worker 1's pool holds the other)
    assert gov.threads_for(1) == 1
    gov.idle(1)
    assert released == [1, 1]  # worker 0 decodes: worker 1 gives its pool back
    assert gov.threads_for(0) == 2
    clock.now += ACTIVE_WINDOW_S + 0.01
    gov.idle(0)
    assert released == [1, 1]  # nobody decoded lately: kept
    writer.close_all()


def test_explicit_threads_and_the_plan_off_keep_each_worker_at_its_count(tmp_path: Path) -> None:
    clock, pinned = FakeClock(), []
    released: list[int] = []
    fixed = ThreadGovernor(
        fixed_threads=3, clock=clock, pin=pinned.append, release=lambda: released.append(1) or True
    )
    assert [fixed.threads_for(w) for w in (0, 1, 2)] == [3, 3, 3]
    fixed.idle(0)
    assert released == [1]  # others decode: explicit threads give an idle pool back too
    writer, off = governor(tmp_path, Share(2, (0, 1), fixed=True), clock, pinned)
    assert [off.threads_for(w) for w in (0, 1)] == [2, 2]
    assert pinned == []  # never moved
    writer.close_all()


def test_a_plan_change_reaches_a_generating_worker_at_its_next_decode(tmp_path: Path) -> None:
    """Issue 21: "A plan change must reach a busy backend within one step". Within its
    share a worker decodes with the count that measures fastest (issue 47,
    `thread_tuner`), which tries each count first: the share's two, then only one."""
    clock, pinned = FakeClock(), []
    writer, gov = governor(tmp_path, Share(2, (0, 1), busy=True), clock, pinned)

    async def go() -> None:
        rig = Rig(governor=gov)
        sink = rig.sink()
        params = SamplingParams(max_new_tokens=50, temperature=0.0)
        rig.worker.submit(Complete("r", rig.reply(), (BOS, 5, 6), params, sink, 0.0))
        await rig.tick(6)
        assert set(rig.ctx.decoded_threads) == {1, 2}
        writer.write(1, Share(1, (1,), busy=True))  # a second model became busy
        seen = len(rig.ctx.decoded_threads)
        await rig.tick(6)
        assert set(rig.ctx.decoded_threads[seen:]) == {1}
        assert pinned[-1] == (1,)
        writer.write(1, Share(2, (0, 1), busy=True))  # it went idle again
        seen = len(rig.ctx.decoded_threads)
        await rig.tick(6)
        assert max(rig.ctx.decoded_threads[seen:]) <= 2

    asyncio.run(go())
    writer.close_all()


def test_an_idle_worker_holding_a_pool_is_woken_to_give_it_back(tmp_path: Path) -> None:
    """Issue 47: after a burst on both workers, a lone stream decoded with one of two
    threads until the other worker's idle loop looked again (up to half a second a
    burst: a lone SmolLM2 stream measured 0.95x of one worker there). The busy worker
    wakes the idle one (once), which gives its pool back at once."""
    clock, released, woken = FakeClock(), [], []
    writer = BoardWriter(tmp_path)
    gov = ThreadGovernor(
        board=BoardReader(writer.open(1, Share(2, (0, 1), busy=True))),
        clock=clock,
        pin=lambda cpus: None,
        release=lambda: released.append(1) or True,
    )
    gov.on_wake(0, lambda: woken.append(0))
    gov.on_wake(1, lambda: woken.append(1))
    assert gov.threads_for(0) == 2
    assert gov.threads_for(1) == 1
    assert woken == []  # worker 0 is busy (it never said it was idle): not woken
    gov.idle(1)
    gov.idle(0)  # the burst ends: nobody decodes, each keeps what it holds
    assert released == [] and woken == []
    assert gov.threads_for(1) == 1  # worker 0's idle pool holds a core ...
    assert woken == [0]  # ... so worker 0 is woken
    assert gov.threads_for(1) == 1
    assert woken == [0]  # once, not at every decode
    gov.idle(0)  # woken, it looks again: worker 1 decodes, the pool goes back
    assert released == [1]
    assert gov.threads_for(1) == 2
    writer.close_all()


def test_a_woken_worker_gives_its_pool_back_on_its_own_thread() -> None:
    """The wake-up travels through the worker's inbox: the worker, idle, calls `idle`
    on its own thread (libgomp's pool is that thread's), then waits on."""
    calls: list[int] = []

    class Recording(ThreadGovernor):
        def idle(self, worker_id: int) -> None:
            calls.append(worker_id)

    async def go() -> None:
        gov = Recording(pin=lambda cpus: None, release=lambda: True)
        rig = Rig(governor=gov)
        await rig.tick()  # idle: says so once
        assert calls == [0]
        gov._wakers[0]()
        await rig.tick()
        assert calls == [0, 0, 0]  # the tick's own, and the woken one's
        assert rig.worker.num_dispatched == 0  # nothing was dispatched

    asyncio.run(go())
