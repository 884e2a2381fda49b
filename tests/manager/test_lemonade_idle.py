"""Issue 24, item 6: "`downsize_idle_timeout=0` and the synchronous idle evaluation
semantics (a model is `ready` right after load; when the evaluation call answers, the
downsize is done)", on the fake spawner (fast).

Lemonade's suite loads with `downsize_idle_timeout: 0`, expects `status == "ready"`, then
runs "one idle-only eviction-engine evaluation" synchronously (`simulate-vram-pressure`
with `pct: -1`) and expects `downsized` as soon as it answers.
"""

from __future__ import annotations

import asyncio

from juggler.manager.eviction_engine import MIN_BACKGROUND_IDLE_S
from juggler.manager.pressure import MemoryView, idle_actions

from .conftest import FakeClock, FakeRegistry, run, settings, stub, until
from .fake_spawner import FakeSpawner
from .test_eviction_engine import OPT_IN, FakeSource, managed, statuses

ZERO = {**OPT_IN, "downsize_idle_timeout": 0, "evict_idle_timeout": 3600}


def test_background_downsizes_wait_for_the_floor_the_explicit_pass_does_not() -> None:
    view = MemoryView(
        "a",
        last_use=10.0,
        opted_in=True,
        downsizable_bytes=1,
        downsize_idle_timeout_s=0.0,
        evict_idle_timeout_s=100.0,
    )
    assert idle_actions([view], now=10.0, min_downsize_idle_s=2.0) == ([], 12.0)
    assert [a.model_name for a in idle_actions([view], now=10.0)[0]] == ["a"]
    due = idle_actions([view], now=12.0, min_downsize_idle_s=2.0)[0]
    assert [a.step.value for a in due] == ["downsize"]
    # The floor is for downsizes only: an idle eviction keeps its exact timeout.
    evict = MemoryView("e", last_use=10.0, opted_in=True, evict_idle_timeout_s=0.0)
    assert [a.step.value for a in idle_actions([evict], 10.0, 2.0)[0]] == ["evict"]


def test_ready_right_after_load_and_downsized_when_the_evaluation_answers(
    clock: FakeClock,
) -> None:
    """Idle time passes on the table's clock, moved by the test: on a busy machine the
    background pass must not reach the floor between two steps of the test."""
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("a"))

    async def scenario() -> None:
        async with managed(settings(), reg, fake, source) as m:
            await m.load("a", ZERO)
            assert statuses(m) == {"a": "ready"}
            clock.now += MIN_BACKGROUND_IDLE_S * 0.9  # idle, but not for the floor
            seen = source.num_samples
            await until(lambda: source.num_samples >= seen + 3)  # messages come and go
            assert statuses(m) == {"a": "ready"}
            gate = asyncio.Event()
            fake.of("a").downsize_gate = gate
            first = asyncio.create_task(m.simulate_pressure(-1))
            second = asyncio.create_task(m.simulate_pressure(-1))
            await asyncio.sleep(0.05)
            assert not first.done() and not second.done(), "answered before the downsize"
            gate.set()
            assert await first == [("a", "downsize")]
            assert await second == [], "nothing new to do, but it waited for the running one"
            assert statuses(m) == {"a": "downsized"} and fake.process("a").num_downsized == 1

    run(scenario())
