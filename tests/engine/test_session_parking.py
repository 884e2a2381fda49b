"""Issue 10, "No unbounded waits": "when sequence slots are all held by idle sessions, the
least recently used idle session is parked (its KV saved to host memory, restored on its
next input [...]) so stateless requests always get a slot; a full queue answers 429 with
`Retry-After`; a client that disconnects frees everything it held."

On the fake llama.cpp, tick by tick: a parked session answers exactly what it would have
answered had it never been parked (a control worker with enough sequences says what)."""

from __future__ import annotations

import asyncio

import pytest

from juggler.engine.schedule.messages import (
    AppendInput,
    Cancel,
    Complete,
    CreateSession,
    EndSession,
    Generate,
    RequestDone,
)
from juggler.engine.schedule.stream import EventKind
from juggler.errors import Conflict, SessionNotFound, TooManyRequests
from tests.engine.fake_llama import BOS, Faults, greedy
from tests.engine.rig import Rig
from tests.engine.test_worker_sessions import (
    answer,
    append,
    create,
    generate,
    greedy_params,
    run_out,
    token_ids,
)


async def turn(rig: Rig, sid: str, text: str, n: int = 6) -> list[int]:
    """One turn of a text session: append `text`, generate `n` tokens."""
    await append(rig, sid, text)
    return token_ids(await run_out(rig, await generate(rig, sid, greedy_params(n))))


async def stateless(rig: Rig, rid: str, n: int = 5) -> list[int]:
    sink = rig.sink()
    reply = rig.reply()
    prompt = (BOS, *rid.encode())
    await rig.send(Complete(rid, reply, prompt, greedy_params(n), sink, rig.worker.clock.now()))
    got = await run_out(rig, sink)
    assert answer(reply)["session_id"] == rid
    assert token_ids(got) == greedy(list(prompt), n)
    return token_ids(got)


def test_idle_sessions_holding_every_sequence_are_parked_for_a_stateless_request() -> None:
    async def go() -> None:
        rig, control = Rig(n_seq_max=2), Rig(n_seq_max=4)
        for r in (rig, control):
            await create(r, "a")
            await create(r, "b")
            assert await turn(r, "a", "hello") and await turn(r, "b", "world")
        # Both sequences are held by idle sessions: the request still runs at once.
        await stateless(rig, "ping")
        snap = rig.worker.snapshot
        assert snap.num_parked_sessions == 1 and snap.session_parks == 1
        assert not rig.worker.table.api_session("a").has_seq, "the least recently used"
        # The parked session continues exactly as it would have, KV copied back in.
        assert await turn(rig, "a", " more") == await turn(control, "a", " more")
        assert rig.worker.snapshot.session_restores == 1
        assert rig.worker.table.api_session("a").num_prefilled < 12, "KV restored, not redone"
        assert await turn(rig, "b", " again") == await turn(control, "b", " again")

    asyncio.run(go())


def test_a_new_session_when_every_sequence_is_held_parks_the_lru_idle_one() -> None:
    async def go() -> None:
        rig, control = Rig(n_seq_max=2), Rig(n_seq_max=4)
        for r in (rig, control):
            for sid in ("a", "b", "c"):
                assert (await create(r, sid))["session_id"] == sid
                await turn(r, sid, f"<{sid}>")
        for sid in ("a", "b", "c", "a"):
            assert await turn(rig, sid, "!") == await turn(control, sid, "!")
        assert rig.worker.snapshot.num_parked_sessions == 1
        reply = rig.reply()
        await rig.send(EndSession("b", reply))  # ending a parked session frees nothing else
        assert answer(reply)["deleted"] is True
        assert await turn(rig, "c", "?") == await turn(control, "c", "?")

    asyncio.run(go())


def test_a_kv_that_cannot_be_restored_is_decoded_again() -> None:
    async def go() -> None:
        rig, control = Rig(n_seq_max=1, faults=Faults(fail_restores=True)), Rig(n_seq_max=2)
        for r in (rig, control):
            await create(r, "a")
            await turn(r, "a", "keep this")
        await stateless(rig, "x")
        assert await turn(rig, "a", "+") == await turn(control, "a", "+")

    asyncio.run(go())


def test_generate_on_a_parked_session_waits_for_a_sequence_in_order() -> None:
    """A session's generate waits while every sequence generates (bounded, in order), and
    starts as soon as a generation ends; its answer is the one it would have had."""

    async def go() -> None:
        rig, control = Rig(n_seq_max=1), Rig(n_seq_max=3)
        await create(rig, "a")
        await append(rig, "a", "long")
        busy = await generate(rig, "a", greedy_params(30))
        for sid in ("b", "c"):
            await create(rig, sid)  # start parked: the one sequence is generating
            await append(rig, sid, f"<{sid}> waits as pending input")
            await create(control, sid)
            await append(control, sid, f"<{sid}> waits as pending input")
        replies, sinks = {}, {}
        for sid in ("b", "c"):
            sinks[sid], replies[sid] = rig.sink(), rig.reply()
            await rig.send(Generate(sid, replies[sid], greedy_params(3), sinks[sid], 0.0))
        assert not replies["b"].done() and rig.worker.snapshot.num_waiting == 2
        again = rig.reply()
        await rig.send(Generate("b", again, greedy_params(3), rig.sink(), 0.0))
        with pytest.raises(Conflict):
            answer(again)
        assert (await run_out(rig, busy))[-1].kind is EventKind.DONE
        for sid in ("b", "c"):
            got = await run_out(rig, sinks[sid])
            assert answer(replies[sid])["session_id"] == sid
            want = await run_out(control, await generate(control, sid, greedy_params(3)))
            assert token_ids(got) == token_ids(want)

    asyncio.run(go())


def test_a_waiting_generate_times_out_is_cancelled_or_ends_with_its_session() -> None:
    async def go() -> None:
        rig = Rig(n_seq_max=1, max_waiting=2)
        await create(rig, "a")
        await append(rig, "a", "x")
        busy = await generate(rig, "a", greedy_params(40))
        replies = {}
        for sid in ("b", "c", "d"):
            await create(rig, sid)
            await append(rig, sid, "y")
            replies[sid] = rig.reply()
            await rig.send(Generate(sid, replies[sid], greedy_params(2), rig.sink(), 0.0))
        with pytest.raises(TooManyRequests):
            answer(replies["d"])  # two already wait: the queue is full
        cancel = rig.reply()
        await rig.send(Cancel("b", cancel))
        assert answer(cancel)["cancelled"] is True
        with pytest.raises(Conflict):
            answer(replies["b"])
        rig.worker.api.queue_timeout_s = 0.0
        await rig.tick()
        with pytest.raises(TooManyRequests):
            answer(replies["c"])
        rig.worker.api.queue_timeout_s = 3600
        late = rig.reply()
        await rig.send(Generate("d", late, greedy_params(2), rig.sink(), 0.0))
        ended = rig.reply()
        await rig.send(EndSession("d", ended))
        assert answer(ended)["deleted"] is True
        with pytest.raises(SessionNotFound):
            answer(late)
        assert rig.worker.snapshot.num_waiting == 0
        assert (await run_out(rig, busy))[-1].kind is EventKind.DONE

    asyncio.run(go())


def test_waiting_requests_are_bounded_time_out_and_leave_when_their_client_does() -> None:
    async def go() -> None:
        rig = Rig(n_seq_max=1, max_waiting=2, queue_timeout_s=3600)
        await create(rig, "a")
        await append(rig, "a", "x")
        busy = await generate(rig, "a", greedy_params(40))
        now = rig.worker.clock.now()
        sinks, replies = [], []
        for rid in ("w1", "w2", "w3"):
            sinks.append(rig.sink())
            replies.append(rig.reply())
            cmd = Complete(rid, replies[-1], (BOS, 1, 2), greedy_params(2), sinks[-1], now)
            await rig.send(cmd)
        with pytest.raises(TooManyRequests):
            answer(replies[2])  # a full queue answers 429 at once
        assert not replies[0].done() and rig.worker.snapshot.num_waiting == 2
        sinks[0].cancel()  # the client of w1 went away
        await rig.tick()
        assert replies[0].done() and rig.worker.snapshot.num_waiting == 1
        assert any(isinstance(n, RequestDone) and n.request_id == "w1" for n in rig.notices)
        rig.worker.api.queue_timeout_s = 0.0  # w2 has now waited too long
        await rig.tick()
        with pytest.raises(TooManyRequests):
            answer(replies[1])
        assert rig.worker.snapshot.num_waiting == 0
        assert (await run_out(rig, busy))[-1].kind is EventKind.DONE

    asyncio.run(go())


def test_append_and_create_never_fail_for_want_of_a_sequence() -> None:
    async def go() -> None:
        rig = Rig(n_seq_max=1)
        await create(rig, "a")
        await append(rig, "a", "x")
        busy = await generate(rig, "a", greedy_params(20))
        for sid in ("b", "c"):
            await create(rig, sid)
            reply = rig.reply()
            await rig.send(AppendInput(sid, reply, text="queued input"))
            assert answer(reply)["n_tokens"] > 0
        await run_out(rig, busy)
        reply = rig.reply()
        await rig.send(CreateSession("d", reply))
        assert answer(reply) == {"session_id": "d"}

    asyncio.run(go())
