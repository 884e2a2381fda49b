"""The session API through a Worker on the fake context: create, append, generate,
cancel, end, stop conditions, backpressure. Tick by tick, so every count is exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import (
    AppendInput,
    Cancel,
    Complete,
    CreateSession,
    EndSession,
    Generate,
    Reply,
    SessionGone,
)
from juggler.engine.schedule.stream import EventKind, StreamEvent, StreamSink
from juggler.errors import Conflict, Overloaded, SessionNotFound
from tests.engine.fake_llama import BOS, greedy, text_of
from tests.engine.rig import Rig, events


def answer(reply: Reply) -> dict[str, Any]:
    assert reply.done(), "the worker did not answer within the tick"
    return reply.result()


def greedy_params(n: int, **more: Any) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=0.0, **more)


async def create(rig: Rig, sid: str = "s") -> dict[str, Any]:
    reply = rig.reply()
    await rig.send(CreateSession(sid, reply))
    return answer(reply)


async def append(rig: Rig, sid: str, text: str) -> dict[str, Any]:
    reply = rig.reply()
    await rig.send(AppendInput(sid, reply, text=text))
    return answer(reply)


async def generate(rig: Rig, sid: str, params: SamplingParams) -> StreamSink:
    sink = rig.sink()
    reply = rig.reply()
    await rig.send(Generate(sid, reply, params, sink, 0.0))
    answer(reply)
    return sink


async def run_out(rig: Rig, sink: StreamSink, max_ticks: int = 100) -> list[StreamEvent]:
    """Tick until the stream ends; every event it got."""
    got = events(sink)
    while not got or got[-1].kind is EventKind.TOKEN:
        assert max_ticks > 0, "the stream did not end"
        max_ticks -= 1
        await rig.tick()
        got += events(sink)
    return got


def token_ids(evs: list[StreamEvent]) -> list[int]:
    return [t for e in evs if e.kind is EventKind.TOKEN for t in e.token_ids]


def test_a_text_session_generates_continues_and_ends() -> None:
    async def go() -> None:
        rig = Rig()
        assert (await create(rig))["session_id"] == "s"
        prompt = [BOS, *b"ab"]
        assert await append(rig, "s", "ab") == {"session_id": "s", "n_tokens": 3, "n_past": 3}
        first = await run_out(rig, await generate(rig, "s", greedy_params(5)))
        assert token_ids(first) == greedy(prompt, 5)
        done = first[-1]
        assert done.kind is EventKind.DONE and done.finish_reason == "length"
        assert done.stats is not None and done.stats.output_tokens == 5
        assert done.stats.input_tokens == 3 and done.stats.prompt_tokens_prefilled == 3
        # The KV holds the prompt and every generated token but the last (still pending).
        seq = rig.worker.table.api_session("s").seq_id
        assert rig.ctx.tokens(seq) == prompt + greedy(prompt, 4)

        again = await run_out(rig, await generate(rig, "s", greedy_params(3)))
        assert token_ids(again) == greedy(prompt, 8)[5:], "continues where it stopped"
        stats = again[-1].stats
        assert stats is not None and stats.input_tokens == 8
        assert stats.prompt_tokens_prefilled == 1 and stats.prompt_tokens_reused == 7

        reply = rig.reply()
        await rig.send(EndSession("s", reply))
        assert answer(reply) == {"session_id": "s", "deleted": True}
        assert rig.ctx.tokens(seq) == [] and rig.worker.snapshot.kv_used == 0
        assert any(isinstance(n, SessionGone) and n.session_id == "s" for n in rig.notices)
        gone = rig.reply()
        await rig.send(AppendInput("s", gone, text="x"))
        with pytest.raises(SessionNotFound):
            answer(gone)

    asyncio.run(go())


def test_appended_input_keeps_its_last_token_for_the_generate() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig)
        await append(rig, "s", "hello")
        await rig.tick()
        s = rig.worker.table.api_session("s")
        assert s.tokens == [BOS, *b"hell"] and s.pending == [ord("o")]
        assert all(not r.logits for r in rig.ctx.decoded[-1]), "no logits without a generate"

    asyncio.run(go())


def test_cancel_ends_the_generation_at_the_next_tick_and_keeps_the_kv() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig)
        await append(rig, "s", "story")
        prompt = [BOS, *b"story"]
        sink = await generate(rig, "s", greedy_params(50))
        await rig.tick(3)
        sink.cancel()  # what the HTTP layer does when the client goes away
        await rig.tick()
        got = events(sink)
        done = got[-1]
        assert done.kind is EventKind.DONE and done.finish_reason == "cancelled"
        assert done.stats is not None and done.stats.output_tokens == 4 == len(token_ids(got))
        assert rig.worker.snapshot.num_running == 0
        # The conversation goes on as if it had never been cut.
        rest = await run_out(rig, await generate(rig, "s", greedy_params(3)))
        assert token_ids(got) + token_ids(rest) == greedy(prompt, 7)
        assert rest[-1].stats is not None and rest[-1].stats.prompt_tokens_prefilled == 1

    asyncio.run(go())


def test_the_cancel_command_says_whether_a_generation_ran() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig)
        await append(rig, "s", "abc")
        sink = await generate(rig, "s", greedy_params(20))
        reply = rig.reply()
        await rig.send(Cancel("s", reply))
        assert answer(reply) == {"session_id": "s", "cancelled": True}
        assert events(sink)[-1].finish_reason == "cancelled"
        idle = rig.reply()
        await rig.send(Cancel("s", idle))
        assert answer(idle)["cancelled"] is False

    asyncio.run(go())


def test_input_while_generating_is_a_conflict() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig)
        await append(rig, "s", "abc")
        await generate(rig, "s", greedy_params(20))
        reply = rig.reply()
        await rig.send(AppendInput("s", reply, text="more"))
        with pytest.raises(Conflict):
            answer(reply)

    asyncio.run(go())


def test_end_of_generation_and_stop_strings_finish_with_stop() -> None:
    async def go() -> None:
        rig = Rig()
        await create(rig)
        await append(rig, "s", "wow!")
        eog = await run_out(rig, await generate(rig, "s", greedy_params(5)))
        assert [e.kind for e in eog] == [EventKind.DONE] and eog[0].finish_reason == "stop"
        banned = await run_out(rig, await generate(rig, "s", greedy_params(3, ignore_eos=True)))
        assert banned[-1].finish_reason == "length" and len(token_ids(banned)) == 3

        await create(rig, "t")
        await append(rig, "t", "xyz")
        text = text_of(greedy([BOS, *b"xyz"], 12))
        stop = text[4:6]
        got = await run_out(rig, await generate(rig, "t", greedy_params(12, stop=(stop,))))
        assert got[-1].finish_reason == "stop"
        assert "".join(e.text for e in got) == text[: text.index(stop)]

    asyncio.run(go())


def test_a_slow_consumer_is_cut_off_while_other_streams_go_on() -> None:
    async def go() -> None:
        rig = Rig()
        slow = rig.sink(max_pending=4)
        fast = rig.sink()
        for rid, sink in (("slow", slow), ("fast", fast)):
            reply = rig.reply()
            prompt = (BOS, *rid.encode())
            rig.worker.submit(Complete(rid, reply, prompt, greedy_params(12), sink, 0.0))
        got = await run_out(rig, fast)
        assert got[-1].finish_reason == "length" and len(token_ids(got)) == 12
        cut = events(slow)
        assert [e.kind for e in cut] == [EventKind.TOKEN] * 4 + [EventKind.ERROR]
        assert isinstance(cut[-1].error, Overloaded)

    asyncio.run(go())
