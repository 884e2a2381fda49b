"""Evictions, failed loads and dead backends through the owner task, with the fake
spawner: no processes, milliseconds each. Each test quotes the rule it pins."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from juggler.errors import CheckpointMissing, LoadFailed, ModelNotLoaded, RecipeNotInstalled
from juggler.manager import Manager, ServerState
from juggler.types import ModelInfo

from .conftest import FakeClock, FakeRegistry, run, running, settings, stub, until
from .fake_spawner import FakeSpawner
from .test_eviction_engine import FakeSource, managed


def names(manager: Manager) -> list[str]:
    return sorted(s.model_name for s in manager.snapshot())


def status(manager: Manager, name: str) -> ServerState | None:
    return next((s.status for s in manager.snapshot() if s.model_name == name), None)


async def soon(predicate: object) -> None:
    await until(predicate, step_s=0.001)  # type: ignore[arg-type]


def test_slow_eviction_of_another_type_does_not_hold_up_a_load() -> None:
    """Issue 9: "a slow eviction of an embedding model must not hold up an LLM load" --
    while an LLM being evicted does hold up the next LLM load (it still holds its slot)."""
    fake = FakeSpawner()
    reg = FakeRegistry(stub("emb", labels=("embeddings",)), stub("a"), stub("b"))
    emb_stop, a_stop = fake.hold_stop("emb"), fake.hold_stop("a")

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            await m.load("emb")
            unloading_emb = asyncio.create_task(m.unload("emb"))
            await soon(lambda: status(m, "emb") is ServerState.EVICTING)
            await m.load("a")  # an LLM load while an embedding model is being evicted
            assert status(m, "emb") is ServerState.EVICTING and status(m, "a") is ServerState.READY

            unloading_a = asyncio.create_task(m.unload("a"))
            await soon(lambda: status(m, "a") is ServerState.EVICTING)
            loading_b = asyncio.create_task(m.load("b"))
            await soon(lambda: m.stats()["queued"] == 1)
            for _ in range(50):
                await asyncio.sleep(0)
            assert not loading_b.done() and fake.starts("b") == 0
            a_stop.set()
            assert await unloading_a == ["a"]
            await loading_b
            emb_stop.set()
            assert await unloading_emb == ["emb"]
            assert names(m) == ["b"] and fake.alive() == ["b"]

    run(scenario())


def test_request_for_model_being_evicted_waits_and_reloads_it() -> None:
    """Issue 4: "A request for a model that is being evicted waits and reloads it rather than
    failing." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            first = await m.acquire("a")
            unloading = asyncio.create_task(m.unload("a"))
            await soon(lambda: status(m, "a") is ServerState.EVICTING)
            second = asyncio.create_task(m.acquire("a"))
            await soon(lambda: m.stats()["queued"] == 1)
            assert not second.done() and fake.starts("a") == 1
            first.release()
            assert await unloading == ["a"]
            async with await second as lease:
                assert lease.pid != first.pid and lease.backend_url == fake.process("a").url

    run(scenario())


def test_failed_load_evicts_all_and_retries_once() -> None:
    """Seed 000: "If we attempt to load a new WrappedServer of TYPE into an available slot,
    and the load fails for almost any reason (see exceptions below), evict all
    WrappedServers of every type, then re-attempt loading the new WrappedServer." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("e", labels=("embeddings",)), stub("greedy"), stub("broken"))
    fake.of("greedy").fail_if_others = True  # "out of memory" while others are resident
    fake.of("broken").fail = LoadFailed("weights are corrupt")

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg, fake) as m:
            await m.load("a")
            await m.load("e")
            snap = await m.load("greedy")
            assert snap.status is ServerState.READY and names(m) == ["greedy"]
            assert fake.starts("greedy") == 2 and m.stats()["load_failures"] == 1
            assert [w for w, n, _ in fake.events if n in ("a", "e")][-2:] == ["stop", "stop"]
            await m.load("a")
            with pytest.raises(LoadFailed, match="weights are corrupt") as err:
                await m.load("broken")
            assert err.value.status == 500 and fake.starts("broken") == 2  # one retry only
            assert m.snapshot() == [] and m.stats()["load_failures"] == 3

    run(scenario())


def test_failed_load_with_nothing_else_resident_fails_at_once() -> None:
    """Seed 000: "evict all WrappedServers of every type, then re-attempt loading" -- with
    nothing else resident there is nothing to free, so no retry."""
    fake = FakeSpawner()
    fake.of("broken").fail = LoadFailed("weights are corrupt")

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("broken")), fake) as m:
            with pytest.raises(LoadFailed):
                await m.acquire("broken")
            assert fake.starts("broken") == 1

    run(scenario())


def test_missing_file_never_evicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 000: "Exceptions to the policy: Do not evict models if the WrappedServer failed
    to load because a file was not found on disk." -- found before queueing (checkpoint,
    vendor executable), or at spawn time (the file vanished): never an evict-all."""
    monkeypatch.setenv("PATH", str(tmp_path))
    fake = FakeSpawner()
    fake.of("vanished").fail = CheckpointMissing("Checkpoint file not found: x.gguf")
    reg = FakeRegistry(
        stub("a"),
        stub("missing", checkpoint=str(tmp_path / "gone.gguf")),
        stub("vanished"),
        ModelInfo(name="vendor", checkpoint="x:1b", recipe="flm"),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=2), reg, fake) as m:
            before = await m.load("a")  # and a free slot: no LRU victim either
            for name in ("missing", "vanished"):
                with pytest.raises(CheckpointMissing) as err:
                    await m.acquire(name)
                assert err.value.status == 404
            with pytest.raises(RecipeNotInstalled, match="not installed"):
                await m.load("vendor")
            assert fake.starts("missing") == 0 and fake.starts("vanished") == 1
            assert [(s.model_name, s.pid) for s in m.snapshot()] == [("a", before.pid)]
            assert fake.alive() == ["a"] and m.stats().get("evictions", 0) == 0

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_dead_backend_is_dropped_and_its_slot_freed() -> None:
    """Issue 4 tests: "a backend killed with SIGKILL is noticed and its slot freed" """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            await m.load("a")
            fake.process("a").die()
            await soon(lambda: m.snapshot() == [])
            assert m.stats()["backend_deaths"] == 1 and m.most_recent() is None
            await m.load("b")
            assert m.stats().get("evictions", 0) == 0

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_unresponsive_backend_reported_by_router_is_stopped() -> None:
    """ARCHITECTURE: "`EngineDead` means the engine behind a backend is gone: the manager
    drops that backend from its table." -- a reported backend that answers stays; one that
    does not is stopped, and the next request loads a fresh one."""
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            lease = await m.acquire("a")
            lease.release()
            await m.report_backend_failure(lease)  # it answers: kept
            assert [s.pid for s in m.snapshot()] == [lease.pid]
            fake.of("a").is_healthy = False
            await m.report_backend_failure(lease)
            await soon(lambda: m.snapshot() == [])
            async with await m.acquire("a") as fresh:
                assert fresh.pid != lease.pid

    run(scenario())


def test_auto_evict_unloads_idle_servers_but_not_busy_ones(clock: FakeClock) -> None:
    """Seed 002: "after evict_idle_timeout seconds idle ... the model is fully unloaded" and
    "Models currently processing inference requests cannot be evicted until they finish."
    Idle time passes on the table's clock, moved by the test; memory is never short."""
    fake = FakeSpawner()
    reg = FakeRegistry(stub("busy"), stub("idle"), stub("plain"))

    async def scenario() -> None:
        async with managed(settings(max_loaded_models=-1), reg, fake, FakeSource()) as m:
            await m.load("plain")  # auto_evict is off by default
            await m.load("busy", {"auto_evict": True, "evict_idle_timeout": 5})
            lease = await m.acquire("busy")
            await m.load("idle", {"auto_evict": True, "evict_idle_timeout": 2})
            assert names(m) == ["busy", "idle", "plain"], "no time has passed"
            clock.now += 10
            await soon(lambda: names(m) == ["busy", "plain"])
            assert m.stats()["auto_evictions"] == 1
            lease.release()
            await soon(lambda: not any(s.is_busy for s in m.snapshot()))  # a use, now
            clock.now += 4
            await m.simulate_pressure(0.5)  # a message: the idle pass runs after it
            assert names(m) == ["busy", "plain"], "idle for 4 s of its 5"
            clock.now += 2
            await soon(lambda: names(m) == ["plain"])

    run(scenario())


def test_unload_one_all_and_404() -> None:
    """Seed 000: "When this is provided, unload that specific WrappedServer. Return a 404 if
    `model_name` is not loaded. When no `model_name` is provided, unload all WrappedServers." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("e", labels=("embeddings",)))

    async def scenario() -> None:
        async with running(settings(), reg, fake) as m:
            await m.load("a")
            await m.load("e")
            with pytest.raises(ModelNotLoaded, match="Model not loaded: zzz") as err:
                await m.unload("zzz")
            assert err.value.status == 404
            assert await m.unload("a") == ["a"] and fake.alive() == ["e"]
            await m.load("a")
            assert sorted(await m.unload(None)) == ["a", "e"]
            assert m.snapshot() == [] and fake.alive() == []

    run(scenario())


def test_stop_fails_queued_loads_and_stops_every_backend() -> None:
    """Manager.stop: "Fail queued loads, stop every backend (SIGTERM, then SIGKILL), end the
    owner." -- a load held mid-start is cancelled and leaves nothing running."""
    fake = FakeSpawner()
    fake.hold("b")

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a"), stub("b")), fake) as m:
            await m.load("a")
            loading = asyncio.create_task(m.load("b"))
            await soon(lambda: fake.num_loading == 1)
        with pytest.raises(LoadFailed, match="shutting down"):
            await loading
        assert fake.alive() == [] and m.snapshot() == []

    run(scenario())
