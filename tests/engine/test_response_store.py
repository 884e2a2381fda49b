"""The backend's stored responses: which session a continuation may take (only the head
of its conversation, once), and sessions ended when nobody heads them any more."""

from __future__ import annotations

import asyncio

import pytest

from juggler.engine.http.response_store import ResponseStore, StoredResponse
from juggler.errors import ResponseNotFound


def stored(rid: str, session: str | None, setup: str = "s") -> StoredResponse:
    return StoredResponse(rid, {"id": rid}, [], setup, session)


def test_only_the_head_of_a_session_continues_on_it_and_only_once() -> None:
    async def go() -> None:
        ended: list[str] = []

        async def end(sid: str) -> None:
            ended.append(sid)

        store = ResponseStore(end)
        first = stored("r1", "S")
        store.put(first)
        assert store.claim(first, "other setup") is None, "another prompt setup: start anew"
        assert store.claim(first, "s") == "S"
        assert store.claim(first, "s") is None, "a head is claimed once"
        store.put(stored("r2", "S"))
        assert store.claim(store.get("r1"), "s") is None, "r1 is no longer the head"
        assert ended == []

    asyncio.run(go())


def test_deleting_or_forgetting_a_head_ends_its_session() -> None:
    async def go() -> None:
        ended: list[str] = []

        async def end(sid: str) -> None:
            ended.append(sid)

        store = ResponseStore(end, capacity=2)
        store.put(stored("r1", "A"))
        store.put(stored("r2", "B"))
        store.delete("r1")
        with pytest.raises(ResponseNotFound):
            store.get("r1")
        store.put(stored("r3", "C"))
        store.put(stored("r4", "D"))  # over capacity: r2 goes, and session B with it
        await asyncio.sleep(0)
        assert sorted(ended) == ["A", "B"] and len(store) == 2
        with pytest.raises(ResponseNotFound):
            store.delete("r2")

    asyncio.run(go())


def test_heads_hold_at_most_the_cell_budget_and_the_oldest_give_way() -> None:
    """Issue 24: the OpenAI Agents SDK stores every response (`store` defaults to true)
    and never continues one; the heads' sessions are a cache, so they may not fill the
    KV cache that every request needs: past the budget the oldest sessions end, their
    responses stay (continuing one prefills anew)."""

    async def go() -> None:
        ended: list[str] = []

        async def end(sid: str) -> None:
            ended.append(sid)

        store = ResponseStore(end, cell_budget=100)
        for i, cells in enumerate([40, 40, 10]):
            store.put(StoredResponse(f"r{i}", {}, [], "s", f"S{i}", cells))
        assert store.held_cells() == 90
        store.put(StoredResponse("r3", {}, [], "s", "S3", 30))
        await asyncio.sleep(0)
        assert ended == ["S0"] and store.held_cells() == 80
        assert store.get("r0").session_id is None and store.claim(store.get("r0"), "s") is None
        store.put(StoredResponse("r4", {}, [], "s", "S4", 500))
        await asyncio.sleep(0)
        assert ended == ["S0", "S1", "S2", "S3", "S4"], "one too large for the budget goes too"
        assert store.held_cells() == 0 and len(store) == 5

    asyncio.run(go())
