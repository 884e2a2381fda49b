"""The Manager's API around the rules, with the fake spawner (no processes, milliseconds
each): leases, options checked before anything is queued, published snapshots."""

from __future__ import annotations

import asyncio

import pytest

from juggler.errors import BadRequest, Forbidden, ModelNotLoaded
from juggler.manager import Manager, ServerState
from juggler.types import Device, ModelInfo

from .conftest import FakeRegistry, run, running, settings, stub, until
from .fake_spawner import FakeSpawner


def names(manager: Manager) -> list[str]:
    return sorted(s.model_name for s in manager.snapshot())


async def soon(predicate: object) -> None:
    await until(predicate, step_s=0.001)  # type: ignore[arg-type]


@pytest.mark.usefixtures("restarts_never_due")
def test_lease_by_server_id_never_loads_and_refuses_a_server_not_ready() -> None:
    """Issue 9: `lease(server_id)` is "a lease on that exact server if it is READY, never
    loading anything; raises `ModelNotLoaded` if that server is not ready (evicting, gone,
    dead)" -- session routes must never trigger a reload."""
    fake = FakeSpawner()
    stop_gate = fake.hold_stop("a")

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            first = await m.load("a")
            async with await m.lease(first.server_id) as lease:
                assert (lease.server_id, lease.pid) == (first.server_id, first.pid)
                assert lease.backend_url == first.backend_url == fake.process("a").url
                assert lease.model_name == "a" and lease.info.name == "a"
                await soon(lambda: m.snapshot()[0].in_flight == 1)
            unloading = asyncio.create_task(m.unload("a"))
            await soon(lambda: m.snapshot()[0].status is ServerState.EVICTING)
            with pytest.raises(ModelNotLoaded, match="Model not loaded: a"):
                await m.lease(first.server_id)  # evicting
            stop_gate.set()
            await unloading
            with pytest.raises(ModelNotLoaded) as err:
                await m.lease(first.server_id)  # gone
            assert err.value.status == 404

            second = await m.load("a")  # a reload is another server
            with pytest.raises(ModelNotLoaded):
                await m.lease(first.server_id)
            fake.process("a").die()
            with pytest.raises(ModelNotLoaded):
                await m.lease(second.server_id)  # dead (maybe before its exit is seen)
            assert fake.starts("a") == 2 and names(m) == []

    run(scenario())


def test_cancelled_request_while_loading_leaks_no_in_flight() -> None:
    """Seed 000: busy means "busy fulfilling an inference request" -- a request whose client
    went away during the auto-load holds nothing, so the server stays evictable; and
    releasing a lease twice counts once."""
    fake = FakeSpawner()
    gate = fake.hold("a")

    async def scenario() -> None:
        async with running(
            settings(max_loaded_models=1), FakeRegistry(stub("a"), stub("b")), fake
        ) as m:
            gone = asyncio.create_task(m.acquire("a"))
            await soon(lambda: fake.num_loading == 1)
            gone.cancel()
            gate.set()
            async with await m.acquire("a") as lease:
                lease.release()  # twice: once here, once on leaving the block
            await soon(lambda: m.snapshot()[0].in_flight == 0)
            await m.load("b")  # not blocked by a leaked request
            assert names(m) == ["b"]

    run(scenario())


def test_lease_released_from_another_thread() -> None:
    """Lease: "it is idempotent and may be called from any coroutine on the manager's loop
    (or, less cheaply, from another thread)." """
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(stub("a")), fake) as m:
            lease = await m.acquire("a")
            await asyncio.to_thread(lease.release)
            await soon(lambda: m.snapshot()[0].in_flight == 0)

    run(scenario())


def test_reads_come_from_the_published_snapshot() -> None:
    """ARCHITECTURE: "Only the manager task changes the residency table. Routes read
    snapshots." -- a snapshot taken earlier does not change; health fields are filled from
    what the backend reported when it started."""
    fake = FakeSpawner()
    fake.of("a").device = Device.CPU  # what a llamacpp backend reports with no offload

    async def scenario() -> None:
        assert (await _fresh(fake)).max_models()["llm"] == 1
        async with running(settings(max_loaded_models=2), FakeRegistry(stub("a")), fake) as m:
            snap = await m.load("a")
            held = m.snapshot()
            assert snap.device == Device.CPU and snap.load_duration_s is not None
            health = snap.to_health()
            assert health["device"] == "cpu" and health["recipe"] == "command"
            assert health["recipe_options"]["ctx_size"] == 512
            assert health["status"] == "ready" and health["backend_url"] == snap.backend_url
            async with await m.acquire("a"):
                await soon(lambda: m.snapshot()[0].in_flight == 1)
                assert held[0].in_flight == 0
                assert m.stats()["loads"] == 1 and m.stats()["queued"] == 0
            assert m.max_models() == dict.fromkeys(
                ("llm", "embedding", "reranking", "audio", "image"), 2
            )

    run(scenario())


async def _fresh(fake: FakeSpawner) -> Manager:
    """A manager that was never started: reads answer from the settings."""
    m = Manager(settings(), FakeRegistry(), spawner=fake)
    assert m.snapshot() == [] and m.most_recent() is None and m.stats() == {}
    return m


@pytest.mark.parametrize(
    ("overrides", "param"),
    [
        ({"ctx_size": 1}, "ctx_size"),
        ({"llamacpp_backend": "tpu"}, "llamacpp_backend"),
        ({"llamacpp_args": "--bogus 1"}, "llamacpp_args"),
        ({"llamacpp_args": "--workers '2"}, "llamacpp_args"),
        ({"downsize_idle_timeout": -5}, "downsize_idle_timeout"),
        ({"evict_weight_factor": 0}, "evict_weight_factor"),
    ],
)
def test_bad_option_is_400_before_anything_is_queued(
    overrides: dict[str, object], param: str
) -> None:
    """Issue 9: options are resolved "BEFORE anything is queued, so a bad option is a 400
    that evicts nothing"."""
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            before_ = await m.load("a")
            with pytest.raises(BadRequest) as err:
                await m.load("b", overrides)
            assert err.value.status == 400 and err.value.param == param
            assert fake.starts() == 1 and m.stats()["queued"] == 0
            assert [(s.model_name, s.pid) for s in m.snapshot()] == [("a", before_.pid)]
            assert m.snapshot()[0].status is ServerState.READY

    run(scenario())


def test_unparseable_command_template_is_400() -> None:
    """Issue 9: "An unparseable `command` template in a `command` recipe (shlex ValueError,
    e.g. an unclosed quote) must become a BadRequest naming `command`, not a 500." """
    broken = ModelInfo(name="broken", checkpoint="", recipe="command", command="python 'unclosed")
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(settings(), FakeRegistry(broken), fake) as m:
            with pytest.raises(BadRequest) as err:
                await m.load("broken")
            assert err.value.param == "command" and fake.starts() == 0

    run(scenario())


def test_command_models_are_refused_unless_the_admin_allows_them() -> None:
    """Issue 10: "command recipes are off unless `allow_command_recipes` is set in the
    config file (not over HTTP)" -- a `command` model registered earlier (e.g. by the CLI)
    is refused at load time, before any process starts."""
    fake = FakeSpawner()

    async def scenario() -> None:
        async with running(
            settings(allow_command_recipes=False), FakeRegistry(stub("a")), fake
        ) as m:
            with pytest.raises(Forbidden, match="allow_command_recipes"):
                await m.load("a")
            with pytest.raises(Forbidden):
                await m.acquire("a")
            assert fake.starts() == 0

    run(scenario())
