"""KV bookkeeping on the fake context: the one rollback, cached-sequence eviction, the
full-context wait or refusal, speculation taken back, compaction, parking."""

from __future__ import annotations

import asyncio

import pytest

from juggler.engine.llama.ports import ContextParams
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.batch import FINAL_ROWS
from juggler.engine.schedule.messages import AppendInput, Complete, CreateSession, Generate
from juggler.engine.schedule.stream import EventKind, StreamEvent, StreamSink
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.session import Session, SessionState
from juggler.engine.worker.table import SessionTable
from juggler.errors import ContextOverflow
from tests.engine.fake_llama import BOS, FakeContext, Faults, greedy
from tests.engine.rig import Rig, events


def book(n_ctx: int = 100, faults: Faults | None = None) -> tuple[KvBook, FakeContext]:
    ctx = FakeContext(ContextParams(n_ctx, 64, 64, 4, 1), faults or Faults())
    return KvBook(ctx, SessionTable(4), cache_cells=1000, parked_cells=0), ctx


def holding(kv: KvBook, ctx: FakeContext, sid: str, seq: int, tokens: list[int]) -> Session:
    s = Session(sid, seq, tokens=list(tokens))
    ctx.cells[seq] = dict(enumerate(tokens))
    kv.table.add(s)
    return s


def cached(kv: KvBook, ctx: FakeContext, seq: int, n: int, last_used: int) -> Session:
    s = holding(kv, ctx, f"c{seq}", seq, [seq] * n)
    s.is_ephemeral = True
    s.state = SessionState.CACHED
    s.last_used = last_used
    return s


def params(n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=0.0)


def tokens_of(sink: StreamSink) -> list[int]:
    return tokens_of_events(events(sink))


def tokens_of_events(evs: list[StreamEvent]) -> list[int]:
    return [t for e in evs if e.kind is EventKind.TOKEN for t in e.token_ids]


# -- KvBook alone ------------------------------------------------------------------------
def test_rollback_drops_the_tail_from_the_kv_and_the_session() -> None:
    kv, ctx = book()
    s = holding(kv, ctx, "s", 0, [1, 2, 3, 4, 5])
    s.pending = [9]
    kv.rollback(s, 3)
    assert s.tokens == [1, 2, 3] and ctx.tokens(0) == [1, 2, 3] and s.pending == [9]


def test_rollback_requeues_the_kept_tokens_when_a_partial_removal_fails() -> None:
    kv, ctx = book(faults=Faults(no_partial_rm=True))
    s = holding(kv, ctx, "s", 0, [1, 2, 3, 4, 5])
    s.pending = [9]
    kv.rollback(s, 3)
    assert s.tokens == [] and ctx.tokens(0) == [] and s.pending == [1, 2, 3, 9]


def test_cached_sequences_are_evicted_least_recently_used_first_for_room() -> None:
    kv, ctx = book(n_ctx=100)
    holding(kv, ctx, "live", 0, [7] * 40)
    cached(kv, ctx, 1, 20, last_used=5)
    cached(kv, ctx, 2, 20, last_used=1)
    cached(kv, ctx, 3, 10, last_used=3)
    assert kv.free() == 10 and kv.live() == 40
    assert kv.make_room(10) == 10, "enough already: nothing evicted"
    assert kv.make_room(25) == 30, "the oldest (seq 2) frees enough"
    assert kv.make_room(35) == 40, "then the next oldest (seq 3)"
    assert [c.key for c in kv.table.cached()] == [1]
    assert ctx.tokens(2) == [] and ctx.tokens(3) == [] and len(ctx.tokens(1)) == 20
    assert kv.make_room(100) == 60, "live sessions are never evicted"
    assert kv.table.get("live") is not None


def test_a_new_session_takes_a_free_sequence_before_recycling_a_cached_one() -> None:
    kv, ctx = book()
    cached(kv, ctx, 0, 5, last_used=2)
    cached(kv, ctx, 1, 5, last_used=1)
    assert kv.take_seq() == 2
    holding(kv, ctx, "a", 2, [])
    holding(kv, ctx, "b", 3, [])
    assert kv.take_seq() == 1 and ctx.tokens(1) == [], "the least recently used is evicted"


def test_finished_stateless_sequences_stay_cached_within_the_budget() -> None:
    kv, ctx = book()
    old = cached(kv, ctx, 0, 30, last_used=1)
    s = holding(kv, ctx, "new", 1, [1] * 30)
    s.is_ephemeral = True
    s.pending = [5]
    kv.on_generation_end(s)
    assert s.state is SessionState.CACHED and s.pending == []
    assert old.state is SessionState.CLOSED, "no recent hits: only the newest is kept"
    assert kv.used() == 30


# -- through a worker ---------------------------------------------------------------------
def test_a_failed_decode_rolls_back_what_reached_the_kv_and_the_session_goes_on() -> None:
    for no_partial_rm in (False, True):

        async def go(no_partial_rm: bool = no_partial_rm) -> None:
            rig = Rig(faults=Faults(fail_decodes={3: 1}, partial=1, no_partial_rm=no_partial_rm))
            await rig.send(CreateSession("s", rig.reply()))
            await rig.send(AppendInput("s", rig.reply(), text="abc"))
            prompt = [BOS, *b"abc"]
            sink = rig.sink()
            await rig.send(Generate("s", rig.reply(), params(10), sink, 0.0))
            await rig.tick()  # decode 3 fails after one row reached the KV
            got = events(sink)
            assert got[-1].kind is EventKind.ERROR
            assert isinstance(got[-1].error, ContextOverflow)
            s = rig.worker.table.api_session("s")
            assert rig.ctx.tokens(s.seq_id) == s.tokens, "the KV holds exactly the tokens"
            first = [t for e in got for t in e.token_ids]
            again = rig.sink()
            await rig.send(Generate("s", rig.reply(), params(4), again, 0.0))
            await rig.tick(4)
            assert first + tokens_of(again) == greedy(prompt, 5)

        asyncio.run(go())


def test_a_stateless_request_waits_while_others_generate_and_is_refused_when_none_do() -> None:
    async def go() -> None:
        rig = Rig(n_ctx=64)
        await rig.send(CreateSession("s", rig.reply()))
        await rig.send(AppendInput("s", rig.reply(), text="x" * 30))  # 31 live cells
        running = rig.sink()
        rig.worker.submit(Complete("run", rig.reply(), (BOS, 1, 2), params(3), running, 0.0))
        await rig.tick()
        waiting_reply = rig.reply()
        prompt = (BOS, *b"y" * 29)  # 30: more than the 64 - 35 cells left
        waiting = rig.sink()
        rig.worker.submit(Complete("wait", waiting_reply, prompt, params(2), waiting, 0.0))
        await rig.tick()
        assert not waiting_reply.done() and rig.worker.snapshot.num_waiting == 1
        await rig.tick(4)  # "run" finishes and frees its (now cached) cells
        assert waiting_reply.done() and waiting_reply.exception() is None
        assert events(waiting)[-1].finish_reason == "length"

        refused = rig.reply()
        rig.worker.submit(Complete("no", refused, (BOS, *b"z" * 40), params(2), rig.sink(), 0.0))
        await rig.tick()
        with pytest.raises(ContextOverflow, match="KV cache is full"):
            refused.result()

    asyncio.run(go())


def test_input_after_a_user_turn_takes_the_decoded_assistant_header_back_out() -> None:
    async def go() -> None:
        rig = Rig()
        ask = {"role": "user", "content": "hi"}
        more = {"role": "user", "content": "and more"}

        async def session(sid: str, *turns: tuple[dict[str, str], ...]) -> list[int]:
            await rig.send(CreateSession(sid, rig.reply()))
            for msgs in turns:
                await rig.send(AppendInput(sid, rig.reply(), messages=msgs))
                await rig.tick()  # the turn and its speculative header are decoded
            sink = rig.sink()
            await rig.send(Generate(sid, rig.reply(), params(6), sink, 0.0))
            await rig.tick(6)
            s = rig.worker.table.api_session(sid)
            assert rig.ctx.tokens(s.seq_id) == s.tokens
            return tokens_of(sink)

        split = await session("split", (ask,), (more,))
        whole = await session("whole", (ask, more))
        assert split == whole and len(split) == 6

    asyncio.run(go())


def test_a_speculative_header_lets_the_first_token_come_from_kept_logits() -> None:
    async def go() -> None:
        rig = Rig()
        await rig.send(CreateSession("s", rig.reply()))
        await rig.send(AppendInput("s", rig.reply(), messages=({"role": "user", "content": "q"},)))
        await rig.tick()  # the turn and the header take two prefill chunks
        s = rig.worker.table.api_session("s")
        assert s.saved_logits is not None and not s.pending
        held = list(s.tokens)
        decodes = rig.ctx.num_decodes
        sink = rig.sink()
        await rig.send(Generate("s", rig.reply(), params(3), sink, 0.0))
        first = tokens_of(sink)
        assert first == greedy(held, 2), "two tokens in one tick: one from the kept logits"
        assert rig.ctx.num_decodes == decodes + 1 and len(rig.ctx.decoded[-1]) == 1

    asyncio.run(go())


async def session_then_burst(rig: Rig) -> tuple[StreamSink, list[int]]:
    """A session that generated 3 tokens, then two stateless requests around it; the
    last one just finished, so the worker's next idle tick compacts."""
    await rig.send(CreateSession("s", rig.reply()))
    await rig.send(AppendInput("s", rig.reply(), text="story"))
    first = rig.sink()
    await rig.send(Generate("s", rig.reply(), params(3), first, 0.0))
    await rig.tick(3)
    for i in range(2):
        sink = rig.sink()
        rig.worker.submit(Complete(f"r{i}", rig.reply(), (BOS, i, 7), params(2), sink, 0.0))
        await rig.tick(2)
        assert events(sink)[-1].kind is EventKind.DONE
        if i == 0:
            await rig.tick()  # idle
    return first, [BOS, *b"story"]


def test_idle_compaction_keeps_every_sequence_and_its_continuation() -> None:
    async def go() -> None:
        rig = Rig()
        first, prompt = await session_then_burst(rig)
        compactions = rig.worker.snapshot.num_compactions
        before = {x.seq_id: rig.ctx.tokens(x.seq_id) for x in rig.worker.table.values()}
        assert len(before) == 2, "the session and the newest cached sequence"
        await rig.tick()  # idle: compaction
        assert rig.worker.snapshot.num_compactions == compactions + 1
        assert {k: rig.ctx.tokens(k) for k in before} == before
        rest = rig.sink()
        await rig.send(Generate("s", rig.reply(), params(3), rest, 0.0))
        await rig.tick(3)
        assert tokens_of(first) + tokens_of(rest) == greedy(prompt, 6)

    asyncio.run(go())


def test_a_failed_restore_puts_a_sessions_tokens_back_to_pending_and_forgets_cached() -> None:
    kv, ctx = book(faults=Faults(fail_restores=True))
    s = holding(kv, ctx, "s", 0, [1, 2, 3])
    s.pending = [4]
    cached(kv, ctx, 1, 5, last_used=1)
    ctx.num_removals += 1  # something was removed since the last compaction
    kv.compact()
    assert s.tokens == [] and s.pending == [1, 2, 3, 4] and ctx.used() == 0
    assert kv.table.cached() == [] and kv.num_compactions == 1


def test_after_a_failed_restore_the_session_is_decoded_again_and_goes_on() -> None:
    async def go() -> None:
        faults = Faults()
        rig = Rig(faults=faults)
        first, prompt = await session_then_burst(rig)
        s = rig.worker.table.api_session("s")
        held = s.tokens + s.pending
        faults.fail_restores = True
        await rig.tick()  # idle: compaction fails, then the tokens are prefilled again
        assert rig.worker.table.cached() == []
        assert [r.token for r in rig.ctx.decoded[-1]] == held[:-1]
        assert s.tokens == held[:-1] and rig.ctx.tokens(s.seq_id) == s.tokens
        faults.fail_restores = False
        rest = rig.sink()
        await rig.send(Generate("s", rig.reply(), params(3), rest, 0.0))
        await rig.tick(3)
        assert tokens_of(first) + tokens_of(rest) == greedy(prompt, 6)

    asyncio.run(go())


def test_an_idle_worker_parks_a_cached_prefix_and_a_request_sharing_it_restores_it() -> None:
    async def go() -> None:
        rig = Rig(n_ctx=512, parked_cells=512)
        system = (BOS, *b"You are a helpful assistant. " * 3)
        assert len(system) >= 64
        first = rig.sink()
        rig.worker.submit(Complete("a", rig.reply(), (*system, *b"Q1"), params(2), first, 0.0))
        await rig.tick(4)
        assert events(first)[-1].kind is EventKind.DONE
        await rig.tick()  # idle: park
        assert rig.worker.snapshot.num_parked == 1 and rig.ctx.used() == 0
        second = rig.sink()
        prompt = (*system, *b"Q2")
        rig.worker.submit(Complete("b", rig.reply(), prompt, params(3), second, 0.0))
        await rig.tick(3)
        got = events(second)
        assert [t for e in got for t in e.token_ids] == greedy(prompt, 3)
        stats = got[-1].stats
        # All it shares (system and "Q") but the prompt's last FINAL_ROWS tokens.
        assert stats is not None
        assert stats.prompt_tokens_reused == len(system) + 2 - FINAL_ROWS
        assert rig.worker.snapshot.num_parked == 0

    asyncio.run(go())


def test_a_request_sharing_a_running_requests_prefix_starts_on_its_cells() -> None:
    """Eight clients asking about one document arrive while the first is answering: the
    cached document went to the first, and the others would prefill it again. The new
    sequence shares the running one's cells for the common prefix instead."""

    async def go() -> None:
        rig = Rig(n_ctx=512)
        doc = (BOS, *b"Shipments from Rotterdam to Lyon, every Monday. " * 2)
        assert len(doc) >= 64
        first = rig.sink(max_pending=1000)
        rig.worker.submit(Complete("a", rig.reply(), (*doc, *b"Q1"), params(40), first, 0.0))
        sessions = rig.worker.table
        while not any(s.session_id == "a" and s.generation and s.n_past > len(doc) + 3
                      for s in sessions.values()):  # fmt: skip
            await rig.tick()
        second = rig.sink()
        prompt = (*doc, *b"Q2")
        rig.worker.submit(Complete("b", rig.reply(), prompt, params(5), second, 0.0))
        for _ in range(10):
            await rig.tick()
        got = events(second)
        assert got[-1].kind is EventKind.DONE, got[-1]
        assert tokens_of_events(got) == greedy(prompt, 5)
        stats = got[-1].stats
        # All it shares (doc and "Q") but the prompt's last FINAL_ROWS tokens.
        assert stats is not None
        assert stats.prompt_tokens_reused == len(doc) + 2 - FINAL_ROWS
        assert rig.ctx.num_copies == 1 and rig.worker.snapshot.num_shares == 1
        # The first goes on unharmed to its own end.
        seen: list[StreamEvent] = []
        while not seen or seen[-1].kind is not EventKind.DONE:
            await rig.tick()
            seen += events(first)
        assert tokens_of_events(seen) == greedy((*doc, *b"Q1"), 40)

    asyncio.run(go())


def test_a_generation_that_fills_the_context_ends_alone_and_the_newcomer_runs() -> None:
    """A loaded run saw a request refused with "the KV cache is full" because, at the
    tick it arrived, another stream's generation reached the end of the context: both
    waited for cells and both were ended. Only the generation holding the most cells is
    ended; its cells are then cached, and the newcomer fits."""

    async def go() -> None:
        rig = Rig(n_ctx=64, cache_cells=0)
        long = rig.sink(max_pending=1000)
        rig.worker.submit(Complete("long", rig.reply(), (BOS, 1, 2), params(500), long, 0.0))
        sessions = rig.worker.table
        while not any(s.session_id == "long" and s.n_past >= 50 for s in sessions.values()):
            await rig.tick()
        late_reply, late = rig.reply(), rig.sink()
        rig.worker.submit(Complete("late", late_reply, (BOS, 7, 8), params(12), late, 0.0))
        for _ in range(30):  # both grow by a cell a tick: the cells run out before "late" ends
            await rig.tick()
        ended = events(long)[-1]
        assert isinstance(ended.error, ContextOverflow) and "KV cache is full" in str(ended.error)
        assert late_reply.done() and late_reply.exception() is None
        got = events(late)
        assert got[-1].kind is EventKind.DONE and got[-1].finish_reason == "length", got[-1]
        assert len(tokens_of_events(got)) == 12

    asyncio.run(go())
