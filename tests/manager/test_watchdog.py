"""The watchdog (issue 10): "reloads a dead backend with its options and pin, with
backoff, and reports it in health and metrics". Fake spawner: no processes."""

from __future__ import annotations

import pytest

from juggler.errors import LoadFailed
from juggler.manager import Manager, messages, watchdog
from juggler.manager.watchdog import MAX_ATTEMPTS, MAX_DELAY_S, restart_delay

from .conftest import FakeRegistry, run, running, settings, stub, until
from .fake_spawner import FakeSpawner


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "restart_delay", lambda attempt: 0.01 * (attempt + 1))


async def soon(predicate: object, timeout_s: float = 60.0) -> None:
    await until(predicate, timeout_s=timeout_s, step_s=0.001)  # type: ignore[arg-type]


def ready(m: Manager, name: str, not_pid: int | None = None) -> bool:
    return any(
        s.model_name == name and s.status.value == "ready" and s.pid != not_pid
        for s in m.snapshot()
    )


def test_backoff_doubles_and_is_capped() -> None:
    assert [restart_delay(a) for a in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert restart_delay(50) == MAX_DELAY_S


def test_a_pinned_model_that_dies_comes_back_pinned_with_its_options() -> None:
    """Issue 10, point 6: "a killed backend of a pinned model is not reloaded and loses
    its pin" must not happen."""
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            await m.load("a", {"ctx_size": 1024}, pinned=True)
            first = fake.process("a").pid
            fake.process("a").die()
            await soon(lambda: ready(m, "a", not_pid=first))
            snap = next(s for s in m.snapshot() if s.model_name == "a")
            assert snap.pinned and snap.options.ctx_size == 1024
            assert m.stats()["backend_deaths"] == 1 and m.stats()["backend_restarts"] == 1
            assert m.restarts() == {"restarting": [], "gave_up": []}

    run(scenario())


def test_a_model_that_keeps_failing_is_given_up_after_max_attempts() -> None:
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            await m.load("a")
            fake.of("a").fail = LoadFailed("the weights are corrupt")
            fake.process("a").die()
            await soon(lambda: m.restarts()["gave_up"] == ["a"])
            assert fake.starts("a") == 1 + MAX_ATTEMPTS
            assert m.stats()["restart_give_ups"] == 1 and not ready(m, "a")
            fake.of("a").fail = None
            await m.load("a")  # the user can still load it by hand
            assert m.restarts()["gave_up"] == []

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_a_restart_never_evicts_the_model_that_took_the_slot() -> None:
    """Watchdog: "if its slot was taken meanwhile, the restart is dropped (the user's newer
    choice wins)". The restart's timer is driven by hand: it falls due only once b holds
    the slot, however slow the machine."""
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            await m.load("a")
            fake.process("a").die()
            await soon(lambda: m.restarts()["restarting"] != [])
            await m.load("b")  # takes the free slot before a's restart is due
            m._post(messages.RestartDue("a"))  # the timer fires
            # Taken and decided in one owner message: published together.
            await soon(lambda: m.restarts()["restarting"] == [])
            assert [s.model_name for s in m.snapshot()] == ["b"] and fake.starts("a") == 1
            assert m.stats()["queued"] == 0, "the restart was dropped, not queued"

    run(scenario())


def test_unloading_a_model_cancels_its_pending_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "restart_delay", lambda attempt: 30.0)
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            await m.load("a")
            fake.process("a").die()
            await soon(lambda: [r["model_name"] for r in m.restarts()["restarting"]] == ["a"])
            assert await m.unload("a") == []
            assert m.restarts()["restarting"] == []

    run(scenario())
