"""Seed 002's soft idle in a worker, on the fake llama.cpp, tick by tick.

Issue 11: "After `downsize_idle_timeout` idle, a llama.cpp backend frees its contexts (KV
cache and compute buffers) and keeps the weights mapped. Open sessions are not lost:
their KV state is saved to host memory [...] and restored on their next input. The next
request restores the contexts transparently." A control worker that is never downsized
says what every answer must be."""

from __future__ import annotations

import asyncio
from typing import Any

from juggler.engine.cache.spill import Spilled
from juggler.engine.schedule.messages import Downsize, EndSession
from tests.engine.rig import Rig
from tests.engine.test_session_parking import stateless, turn
from tests.engine.test_worker_sessions import (
    answer,
    append,
    create,
    generate,
    greedy_params,
    run_out,
)


async def downsize(rig: Rig) -> dict[str, Any]:
    reply = rig.reply()
    await rig.send(Downsize(0, reply))
    return answer(reply)


def test_downsize_frees_the_context_and_sessions_continue_as_if_nothing_happened() -> None:
    async def go() -> None:
        rig, control = Rig(parked_cells=256), Rig(parked_cells=256)
        for r in (rig, control):
            for sid in ("a", "b"):
                await create(r, sid)
                await turn(r, sid, f"<{sid}> hello")
        first = rig.ctx
        got = await downsize(rig)
        assert got == {
            "downsized": True,
            "context_bytes": got["context_bytes"],
            "vram_bytes": 0,  # a fake context on the CPU: nothing on a GPU
            "sessions_parked": 2,
        }
        assert first.closed, "the llama.cpp context was freed"
        snap = rig.worker.snapshot
        assert snap.is_downsized and snap.kv_used == 0 and snap.num_parked_sessions == 2
        again = {"downsized": True, "context_bytes": 0, "vram_bytes": 0, "sessions_parked": 0}
        assert await downsize(rig) == again
        # The next input makes a new context and brings the session's KV back.
        assert await turn(rig, "b", " again") == await turn(control, "b", " again")
        assert rig.ctx is not first and not rig.ctx.closed
        snap = rig.worker.snapshot
        assert not snap.is_downsized and snap.num_restores == 1 and snap.session_restores == 1
        assert await turn(rig, "a", " too") == await turn(control, "a", " too")
        await stateless(rig, "after")

    asyncio.run(go())


def test_a_busy_worker_is_not_downsized() -> None:
    """Seed 002: models "currently processing inference requests cannot be evicted until
    they finish" -- nor downsized: the request that came first wins."""

    async def go() -> None:
        rig = Rig()
        await create(rig, "a")
        await append(rig, "a", "x")
        busy = await generate(rig, "a", greedy_params(10))
        assert await downsize(rig) == {"downsized": False, "reason": "busy"}
        assert not rig.ctx.closed
        await run_out(rig, busy)
        assert (await downsize(rig))["downsized"] is True

    asyncio.run(go())


def test_a_new_session_after_a_downsize_restores_the_context() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig, "a")
        await turn(rig, "a", "x")
        await downsize(rig)
        await create(rig, "fresh")
        assert not rig.worker.snapshot.is_downsized
        assert await turn(rig, "fresh", "hello")

    asyncio.run(go())


def test_parked_kv_past_the_memory_budget_goes_to_disk_and_comes_back() -> None:
    """Issue 11: "their KV state is saved to host memory (or disk past a budget)"."""

    async def go() -> None:
        budget = 8 * 20  # bytes: one short session's KV copy (8 bytes a token) fits
        rig, control = Rig(park_budget_bytes=budget), Rig()
        for r in (rig, control):
            for sid in ("a", "b", "c"):
                await create(r, sid)
                await turn(r, sid, f"<{sid}> a somewhat longer text")
        await downsize(rig)
        kv = rig.worker.kv
        spilled = [s for s in rig.worker.table.values() if isinstance(s.parked_kv, Spilled)]
        assert len(spilled) >= 2 and rig.worker.snapshot.spilled_bytes > 0
        assert all(s.parked_kv.path.is_file() for s in spilled)  # type: ignore[union-attr]
        paths = [s.parked_kv.path for s in spilled]  # type: ignore[union-attr]
        for sid in ("a", "b", "c"):
            assert await turn(rig, sid, " next") == await turn(control, sid, " next")
        assert not any(p.exists() for p in paths), "read back and deleted"
        assert kv.spill.spilled_bytes == 0 and kv.num_session_restores == 3
        assert all(s.num_prefilled < 10 for s in rig.worker.table.values()), "restored, not redone"
        reply = rig.reply()
        await rig.send(Downsize(0, reply))
        await rig.send(EndSession("a", rig.reply()))  # ending a spilled session deletes its file
        rig.worker.close()
        assert kv.spill._dir is None

    asyncio.run(go())
