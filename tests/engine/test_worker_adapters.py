"""LoRA adapters in a worker (seed 004's dynamic LoRA serving), on the fake llama.cpp.

Seed 004: "Support running multiple LoRA adapters in parallel in the same decode batch"
and "MaxActiveAdapter: Maximum number of adapters that can be loaded to GPU memory to
serve a batch. Requests will be queued if the model server has reached MaxActiveAdapter
and cannot load the requested adapter."

The fake's adapter `shift:K` adds K to its greedy rule, so every output says which
adapter produced it; `decoded_adapters` says which adapter each decode ran with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.batch import FINAL_ROWS, Chunk, group_by_adapter
from juggler.engine.schedule.messages import (
    AdapterRef,
    AppendInput,
    Complete,
    CreateSession,
    DropAdapter,
    Generate,
    RequestDone,
)
from juggler.engine.schedule.stream import EventKind, StreamEvent, StreamSink
from juggler.engine.worker.adapters import Slot, choose_slot
from juggler.errors import BadRequest, Conflict
from tests.engine.fake_llama import BOS, greedy
from tests.engine.rig import Rig, events


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


A = AdapterRef("a", "shift:3")
B = AdapterRef("b", "shift:11")


def test_choose_slot_takes_room_then_the_least_recently_used_idle_adapter() -> None:
    assert choose_slot([], set(), 2) == Slot(True)
    assert choose_slot(["x"], {"x"}, 2) == Slot(True)
    assert choose_slot(["x", "y"], set(), 2) == Slot(True, evict="x")
    assert choose_slot(["x", "y"], {"x"}, 2) == Slot(True, evict="y")
    assert choose_slot(["x", "y"], {"x", "y"}, 2) == Slot(False)


def test_a_plan_is_split_into_one_decode_per_adapter_in_plan_order() -> None:
    chunks = [Chunk(0, 1, True), Chunk(1, 1, True), Chunk(2, 5, False), Chunk(3, 1, True)]
    groups = group_by_adapter(chunks, {0: "a", 1: None, 2: "a", 3: None})
    assert groups == [("a", (chunks[0], chunks[2])), (None, (chunks[1], chunks[3]))]
    assert group_by_adapter(chunks, {}) == [(None, tuple(chunks))]


def submit(rig: Rig, rid: str, prompt: list[int], n: int, adapter: AdapterRef | None) -> StreamSink:
    sink = rig.sink()
    params = SamplingParams(max_new_tokens=n, temperature=0.0)
    rig.worker.submit(Complete(rid, rig.reply(), tuple(prompt), params, sink, 0.0, (), adapter))
    return sink


def done_notices(rig: Rig) -> list[RequestDone]:
    return [n for n in rig.notices if isinstance(n, RequestDone) and n.stats is not None]


def ids(evs: list[StreamEvent]) -> list[int]:
    return [t for e in evs if e.kind is EventKind.TOKEN for t in e.token_ids]


async def run_all(rig: Rig, sinks: list[StreamSink], max_ticks: int = 200) -> list[list[int]]:
    got: list[list[StreamEvent]] = [[] for _ in sinks]
    while not all(g and g[-1].kind is not EventKind.TOKEN for g in got):
        assert max_ticks > 0, "the streams did not end"
        max_ticks -= 1
        await rig.tick()
        for g, sink in zip(got, sinks, strict=True):
            g += events(sink)
    for g in got:
        assert g[-1].kind is EventKind.DONE, g[-1]
    return [ids(g) for g in got]


def test_two_adapters_and_the_base_model_in_flight_at_once_each_give_their_own_output() -> None:
    run(_test_two_adapters_and_the_base_model_in_flight_at_once_each_give_their_own_output)


async def _test_two_adapters_and_the_base_model_in_flight_at_once_each_give_their_own_output() -> (
    None
):
    rig = Rig()
    prompt = [BOS, *b"hello"]
    sinks = [submit(rig, "base", prompt, 8, None), submit(rig, "ra", prompt, 8, A)]
    sinks.append(submit(rig, "rb", prompt, 8, B))
    base, out_a, out_b = await run_all(rig, sinks)
    assert base == greedy(prompt, 8)
    assert out_a == greedy(prompt, 8, shift=3)
    assert out_b == greedy(prompt, 8, shift=11)
    assert len({tuple(base), tuple(out_a), tuple(out_b)}) == 3
    ctx = rig.ctx
    # Every decode ran with one adapter and held only that adapter's sequences; the three
    # were in flight together (interleaved decodes, not one request after another).
    seqs_of = {None: set(), "shift:3": set(), "shift:11": set()}
    for rows, adapter in zip(ctx.decoded, ctx.decoded_adapters, strict=True):
        seqs_of[adapter.path if adapter else None].update(r.seq_id for r in rows)
    assert all(len(s) == 1 for s in seqs_of.values())
    assert len(set.union(*seqs_of.values())) == 3
    kinds = [a.path if a else None for a in ctx.decoded_adapters]
    assert kinds[:6].count(None) >= 2 and kinds[:6].count("shift:3") >= 2


def test_past_max_active_adapters_a_request_waits_and_shows_as_waiting() -> None:
    run(_test_past_max_active_adapters_a_request_waits_and_shows_as_waiting)


async def _test_past_max_active_adapters_a_request_waits_and_shows_as_waiting() -> None:
    rig = Rig(max_active_adapters=1)
    prompt = [BOS, *b"abc"]
    first = submit(rig, "ra", prompt, 6, A)
    await rig.tick()
    second = submit(rig, "rb", prompt, 6, B)
    base = submit(rig, "base", prompt, 6, None)  # needs no adapter: passes the queue
    await rig.tick(2)
    snap = rig.worker.snapshot
    assert snap.adapters_loaded == ("a",)
    assert snap.adapters_running == ("a",)
    assert snap.adapters_waiting == ("b",)
    out_a, out_b, out_base = await run_all(rig, [first, second, base])
    assert out_a == greedy(prompt, 6, shift=3)
    assert out_b == greedy(prompt, 6, shift=11)
    assert out_base == greedy(prompt, 6)
    assert rig.worker.snapshot.adapters_loaded == ("b",)
    assert rig.fake.num_adapter_loads == 2 and len(rig.fake.adapters) == 1
    # b waited until a was done: no decode ever ran with b while a had work.
    kinds = [a.path if a else None for a in rig.ctx.decoded_adapters]
    assert kinds.index("shift:11") > max(i for i, k in enumerate(kinds) if k == "shift:3")


def test_a_cached_prefix_is_never_reused_under_another_adapter() -> None:
    run(_test_a_cached_prefix_is_never_reused_under_another_adapter)


async def _test_a_cached_prefix_is_never_reused_under_another_adapter() -> None:
    rig = Rig(cache_cells=256)
    prompt = [BOS, *(b"x" * 40)]
    (base,) = await run_all(rig, [submit(rig, "r1", prompt, 4, None)])
    (again,) = await run_all(rig, [submit(rig, "r2", prompt, 4, None)])
    assert again == base
    (with_a,) = await run_all(rig, [submit(rig, "r3", prompt, 4, A)])
    assert with_a == greedy(prompt, 4, shift=3)
    reused = {n.request_id: n.stats.prompt_tokens_reused for n in done_notices(rig)}
    assert reused["r2"] == len(prompt) - FINAL_ROWS  # the base prompt again: prefix reused
    assert reused["r3"] == 0  # under an adapter the base model's KV is worthless


def test_an_adapter_that_does_not_fit_the_model_is_refused_and_nothing_else_changes() -> None:
    run(_test_an_adapter_that_does_not_fit_the_model_is_refused_and_nothing_else_changes)


async def _test_an_adapter_that_does_not_fit_the_model_is_refused_and_nothing_else_changes() -> (
    None
):
    rig = Rig()
    reply = rig.reply()
    params = SamplingParams(max_new_tokens=4, temperature=0.0)
    bad = AdapterRef("bad", "/not/an/adapter.gguf")
    rig.worker.submit(Complete("r", reply, (BOS, 97), params, rig.sink(), 0.0, (), bad))
    await rig.tick(2)
    assert reply.done() and isinstance(reply.exception(), BadRequest)
    (out,) = await run_all(rig, [submit(rig, "ok", [BOS, 97], 4, None)])
    assert out == greedy([BOS, 97], 4)
    assert rig.worker.snapshot.adapters_loaded == ()


def test_a_session_runs_every_turn_with_its_adapter() -> None:
    run(_test_a_session_runs_every_turn_with_its_adapter)


async def _test_a_session_runs_every_turn_with_its_adapter() -> None:
    rig = Rig()
    await rig.send(CreateSession("s", rig.reply(), adapter=B))
    await rig.send(AppendInput("s", rig.reply(), text="hi"))
    sink = rig.sink()
    await rig.send(Generate("s", rig.reply(), SamplingParams(5, temperature=0.0), sink, 0.0))
    (out,) = await run_all(rig, [sink])
    assert out == greedy([BOS, *b"hi"], 5, shift=11)


def test_an_adapter_in_use_cannot_be_dropped_until_its_requests_end() -> None:
    run(_test_an_adapter_in_use_cannot_be_dropped_until_its_requests_end)


async def _test_an_adapter_in_use_cannot_be_dropped_until_its_requests_end() -> None:
    rig = Rig()
    prompt = [BOS, *b"abc"]
    sink = submit(rig, "ra", prompt, 6, A)
    await rig.tick()
    reply = rig.reply()
    await rig.send(DropAdapter(0, "a", reply))
    assert isinstance(reply.exception(), Conflict)
    await run_all(rig, [sink])
    reply = rig.reply()
    await rig.send(DropAdapter(0, "a", reply))
    assert reply.result() == {"adapter_id": "a", "unloaded": True}
    assert rig.fake.adapters == [] and rig.worker.snapshot.adapters_loaded == ()
