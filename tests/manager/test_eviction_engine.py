"""Seed 002's dynamic memory management in the owner, on the fake spawner (fast).

Seed 002: "A background monitor samples global VRAM usage [...] When usage crosses
auto_evict_threshold_pct, the eviction engine frees the most disposable model. When
auto_evict is disabled, no VRAM polling occurs." -- "Higher score = more disposable [...]
Raise evict_weight_factor on a model to protect it further." -- "A request that arrives
while a model is mid-downsize or mid-eviction transparently interrupts the transition
and is served -- no failed generations." -- "Pinned models are excluded from the eviction
candidate search." """

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from juggler.config import Settings
from juggler.manager import Manager
from juggler.manager.memory import MemorySample

from .conftest import FakeRegistry, resolve_path, run, settings, stub, until
from .fake_spawner import FakeSpawner

MIB = 1 << 20


class FakeSource:
    """A memory source whose usage the test sets; counts its samples."""

    name = "fake"

    def __init__(
        self,
        fraction: float = 0.1,
        total: int = 100 * MIB,
        fraction_of: Callable[[], float] | None = None,
    ) -> None:
        self.fraction = fraction
        self.total = total
        self.num_samples = 0
        #: Usage as a function of the machine's state (what is loaded), like real memory.
        self.fraction_of = fraction_of

    def sample(self) -> MemorySample:
        self.num_samples += 1
        fraction = self.fraction_of() if self.fraction_of is not None else self.fraction
        return MemorySample(int(fraction * self.total), self.total)


@contextlib.asynccontextmanager
async def managed(
    s: Settings, reg: FakeRegistry, fake: FakeSpawner, source: FakeSource
) -> AsyncIterator[Manager]:
    manager = Manager(
        s, reg, resolve=resolve_path, spawner=fake, memory_source=source, monitor_interval_s=0.01
    )
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


def statuses(m: Manager) -> dict[str, str]:
    return {s.model_name: s.to_health()["status"] for s in m.snapshot()}


OPT_IN = {"auto_evict": True}


def test_the_monitor_never_samples_while_nothing_opts_in() -> None:
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("plain"), stub("eager"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, source) as m:
            await m.load("plain")
            for _ in range(20):  # twenty monitor intervals
                await asyncio.sleep(0.01)
            status = m.memory_status()
            assert source.num_samples == 0 and status is not None and not status.is_monitoring
            await m.load("eager", OPT_IN)
            await until(lambda: source.num_samples > 2)
            await m.unload("eager")
            await until(lambda: not m.memory_status().is_monitoring)  # type: ignore[union-attr]
            seen = source.num_samples
            for _ in range(20):
                await asyncio.sleep(0.01)
            assert source.num_samples <= seen + 1, "the monitor stopped with the last opt-in"

    run(scenario())


def test_pressure_evicts_the_most_disposable_and_the_weight_factor_protects() -> None:
    fake, source = FakeSpawner(), FakeSource(fraction=0.1)
    reg = FakeRegistry(stub("cheap"), stub("precious"), stub("pinned"), stub("plain"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, source) as m:
            await m.load("precious", {**OPT_IN, "evict_weight_factor": 1000.0})
            await m.load("cheap", OPT_IN)  # used more recently: still the more disposable
            await m.load("pinned", OPT_IN, pinned=True)
            await m.load("plain")  # not opted in
            # 1 MiB downsizes cannot bring 99% of 100 MiB under 90%: evict.
            assert await m.simulate_pressure(0.99) == [("cheap", "evict")]
            await until(lambda: "cheap" not in statuses(m))
            assert await m.simulate_pressure(0.99) == [("precious", "evict")]
            await until(lambda: sorted(statuses(m)) == ["pinned", "plain"])
            assert await m.simulate_pressure(0.99) == [], "pinned and opted-out stay"
            assert await m.simulate_pressure(0.5) == [], "below the threshold: nothing"

    run(scenario())


def test_a_real_monitor_sample_under_pressure_relieves_it_step_by_step() -> None:
    """One step, then measure again: with both models loaded the machine is at 95%, with
    one at 50% (usage follows what is loaded, as real memory does, so no race between the
    monitor and the test decides the outcome)."""
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, source) as m:
            await m.load("a", OPT_IN)
            await m.load("b", OPT_IN)
            source.fraction_of = lambda: 0.95 if len(statuses(m)) == 2 else 0.5
            await until(lambda: len(statuses(m)) == 1)
            seen = source.num_samples
            await until(lambda: source.num_samples >= seen + 3)  # measured again, and again
            assert len(statuses(m)) == 1 and m.stats()["auto_evictions"] == 1

    run(scenario())


def test_downsizing_is_preferred_when_it_is_enough() -> None:
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("a"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, source) as m:
            await m.load("a", OPT_IN)
            # 90.5% of 100 MiB: freeing 1 MiB is enough.
            assert await m.simulate_pressure(0.905) == [("a", "downsize")]
            assert statuses(m) == {"a": "downsized"} and fake.process("a").num_downsized == 1
            assert await m.simulate_pressure(0.905) == [("a", "evict")], "nothing left to free"

    run(scenario())


def test_idle_pass_downsizes_then_a_request_restores_it() -> None:
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("a"))

    async def scenario() -> None:
        async with managed(settings(), reg, fake, source) as m:
            await m.load("a", {**OPT_IN, "downsize_idle_timeout": 0, "evict_idle_timeout": 3600})
            await until(lambda: statuses(m) == {"a": "downsized"})
            lease = await m.acquire("a")
            assert statuses(m) == {"a": "in_use"} and fake.starts("a") == 1, "no reload"
            lease.release()

    run(scenario())


def test_a_request_during_a_downsize_or_an_eviction_is_served() -> None:
    fake, source = FakeSpawner(), FakeSource()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, source) as m:
            await m.load("a", OPT_IN)
            gate = asyncio.Event()
            fake.of("a").downsize_gate = gate
            pending = asyncio.create_task(m.simulate_pressure(0.905))
            await until(lambda: statuses(m) == {"a": "downsizing"})
            lease = await asyncio.wait_for(m.acquire("a"), 5)  # served at once
            assert fake.starts("a") == 1
            gate.set()
            await pending
            lease.release()
            await until(lambda: statuses(m) == {"a": "ready"})  # the request's restore won
            await m.unload("a")
            await m.load("b", OPT_IN)
            held = fake.hold_stop("b")
            assert await m.simulate_pressure(0.99) == [("b", "evict")]
            await until(lambda: statuses(m).get("b") == "evicting")
            rescue = asyncio.create_task(m.acquire("b"))
            held.set()
            lease_b = await asyncio.wait_for(rescue, 5)
            assert fake.starts("b") == 2, "evicted, then loaded again for the request"
            lease_b.release()

    run(scenario())
