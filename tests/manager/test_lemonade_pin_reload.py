"""Issue 24, item 6: "a pin survives a watchdog reload", also when a request comes before
the restart is due (Lemonade's suite kills a pinned backend, sends a chat at once, and
expects a fresh pid with `pinned` still true). Fake spawner: no processes."""

from __future__ import annotations

import pytest

from juggler.manager import watchdog

from .conftest import FakeRegistry, run, running, settings, stub, until
from .fake_spawner import FakeSpawner


def test_a_request_before_the_restart_is_due_reloads_it_pinned_with_its_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "restart_delay", lambda attempt: 30.0)
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            await m.load("a", {"ctx_size": 1024}, pinned=True)
            first = fake.process("a").pid
            fake.process("a").die()
            await until(lambda: [r["model_name"] for r in m.restarts()["restarting"]] == ["a"])
            async with await m.acquire("a") as lease:
                assert lease.pid != first
            snap = next(s for s in m.snapshot() if s.model_name == "a")
            assert snap.pinned and snap.options.ctx_size == 1024
            assert m.restarts()["restarting"] == [], "the pending restart was taken"
            assert fake.starts("a") == 2

    run(scenario())


def test_an_unpinned_model_reloaded_by_a_request_stays_unpinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "restart_delay", lambda attempt: 30.0)
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            await m.load("a", {"ctx_size": 512})
            fake.process("a").die()
            await until(lambda: m.restarts()["restarting"] != [])
            async with await m.acquire("a"):
                pass
            snap = next(s for s in m.snapshot() if s.model_name == "a")
            assert not snap.pinned and snap.options.ctx_size == 512

    run(scenario())
