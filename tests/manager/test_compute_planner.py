"""The manager's compute planner (issue 21): busy backends from requests in flight, a
short linger, shares written to each backend's board before its lease is handed out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from juggler.compute.board import ENV, BoardReader
from juggler.compute.cpus import allowed_cpus
from juggler.compute.plan import Share
from juggler.manager import Manager
from juggler.manager.compute import ComputePlanner, is_busy
from juggler.manager.snapshot import ServerState
from juggler.options import ModelOptions
from juggler.types import ModelInfo

from .conftest import FakeRegistry, run, running, settings
from .fake_spawner import FakeSpawner


@dataclass
class Recipe:
    name: str = "llamacpp"


@dataclass
class Plan:
    recipe: Recipe = field(default_factory=Recipe)
    threads: int = 0


@dataclass
class Server:
    """What the planner reads of a WrappedServer."""

    server_id: int
    in_flight: int = 0
    state: ServerState = ServerState.READY
    plan: Plan = field(default_factory=Plan)
    compute: Share | None = None
    options: ModelOptions = field(default_factory=ModelOptions)
    is_fully_offloaded: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_busy_means_in_flight_or_within_the_linger() -> None:
    assert is_busy(1, None, 5.0, 0.2)
    assert is_busy(0, 4.9, 5.0, 0.2)
    assert not is_busy(0, 4.7, 5.0, 0.2)
    assert not is_busy(0, None, 5.0, 0.2)


def test_the_cores_follow_the_busy_set_and_a_linger_ends_with_a_wake_up(tmp_path: Path) -> None:
    clock, wakes = Clock(), []
    planner = ComputePlanner(
        cpus=(0, 1), linger_s=0.2, folder=tmp_path, clock=clock, wake=wakes.append
    )
    a, b = Server(1), Server(2)
    env = planner.env_for(a)  # type: ignore[arg-type]
    reader = BoardReader(env[ENV])
    planner.env_for(b)  # type: ignore[arg-type]
    servers = [a, b]
    a.in_flight = 1
    planner.update(servers)  # type: ignore[arg-type]
    assert reader.read() == Share(2, (0, 1), busy=True)
    b.in_flight = 2
    planner.update(servers)  # type: ignore[arg-type]
    assert reader.read() == Share(1, (0,), busy=True)
    assert b.compute == Share(1, (1,), busy=True)
    b.in_flight = 0  # b's last request ended: it keeps its share for the linger
    planner.update(servers)  # type: ignore[arg-type]
    assert reader.read() == Share(1, (0,), busy=True)
    assert wakes == [pytest.approx(0.2)]
    clock.now += 0.21  # the owner woke up (Replan) after the linger
    planner.update(servers)  # type: ignore[arg-type]
    assert reader.read() == Share(2, (0, 1), busy=True)
    assert b.compute == Share(1, (0, 1))
    planner.close()
    assert not list(tmp_path.iterdir())  # every board removed


def test_command_backends_are_outside_the_plan(tmp_path: Path) -> None:
    planner = ComputePlanner(cpus=(0, 1), folder=tmp_path)
    other = Server(1, in_flight=1, plan=Plan(Recipe("command")))
    ours = Server(2, in_flight=1)
    assert planner.env_for(other) == {}  # type: ignore[arg-type]
    planner.update([other, ours])  # type: ignore[arg-type]
    assert other.compute is None and ours.compute == Share(2, (0, 1), busy=True)


def llamacpp(name: str, path: Path) -> ModelInfo:
    path.write_bytes(b"GGUF")
    return ModelInfo(name=name, checkpoint=str(path), recipe="llamacpp")


async def planned_manager(reg: FakeRegistry, fake: FakeSpawner, cpus: tuple[int, ...]) -> Manager:
    """A started Manager over `fake` whose compute plan divides `cpus`, with no linger."""
    manager = Manager(
        settings(max_loaded_models=2, threads=0),
        reg,
        resolve=lambda i: Path(i.checkpoint),
        spawner=fake,
        compute_cpus=cpus,
        compute_linger_s=0.0,
    )
    await manager.start()
    return manager


def test_leases_divide_the_cores_through_the_owner(tmp_path: Path) -> None:
    """Issue 21: "One owner of the machine's compute. The manager already knows which
    backends have work in flight. Give it a compute plan". A share is on the backend's
    board before its lease reaches the caller."""
    fake = FakeSpawner()
    reg = FakeRegistry(llamacpp("a", tmp_path / "a.gguf"), llamacpp("b", tmp_path / "b.gguf"))

    async def scenario() -> None:
        manager = await planned_manager(reg, fake, (0, 1))
        try:
            await manager.load("a")
            await manager.load("b")
            boards = {
                name: BoardReader(env[ENV]) for name, env in zip("ab", fake.envs, strict=True)
            }
            lease_a = await manager.acquire("a")
            assert boards["a"].read() == Share(2, (0, 1), busy=True)
            lease_b = await manager.acquire("b")
            assert boards["a"].read() == Share(1, (0,), busy=True)
            assert boards["b"].read() == Share(1, (1,), busy=True)
            shares = {s.model_name: s.compute for s in manager.snapshot()}
            assert shares == {"a": Share(1, (0,), True), "b": Share(1, (1,), True)}
            health = next(s for s in manager.snapshot() if s.model_name == "b").to_health()
            assert health["compute"] == {
                "threads": 1,
                "cpus": [1],
                "busy": True,
                "planned": True,
                "gpu": False,
            }
            lease_b.release()
            await manager.pin("a", False)  # any message: the release was handled before it
            assert boards["a"].read() == Share(2, (0, 1), busy=True)
            lease_a.release()
        finally:
            await manager.stop()

    run(scenario())


def test_explicit_threads_keep_a_model_outside(tmp_path: Path) -> None:
    fake = FakeSpawner()
    reg = FakeRegistry(llamacpp("a", tmp_path / "a.gguf"))
    cores = len(allowed_cpus())  # more is refused (issue 52)

    async def scenario() -> None:
        async with running(settings(threads=cores), reg, fake) as m:
            await m.load("a")
            lease = await m.acquire("a")
            share = m.snapshot()[0].compute
            assert share is not None and share.fixed and share.threads == cores
            lease.release()

    run(scenario())


def test_a_weight_given_at_load_divides_the_cores_unequally(tmp_path: Path) -> None:
    """Issue 21: "an optional per-model weight for priority is welcome". A /load of the
    loaded model with a new weight takes effect without a reload."""
    fake = FakeSpawner()
    reg = FakeRegistry(llamacpp("a", tmp_path / "a.gguf"), llamacpp("b", tmp_path / "b.gguf"))

    async def scenario() -> None:
        manager = await planned_manager(reg, fake, tuple(range(8)))
        try:
            await manager.load("a", {"compute_weight": 3.0})
            await manager.load("b")
            leases = [await manager.acquire("a"), await manager.acquire("b")]
            shares = {s.model_name: s.compute for s in manager.snapshot()}
            assert shares["a"] == Share(6, tuple(range(6)), True)
            assert shares["b"] == Share(2, (6, 7), True)
            await manager.load("a", {"compute_weight": 1.0})  # same launch: no reload
            shares = {s.model_name: s.compute for s in manager.snapshot()}
            assert shares["a"] == Share(4, (0, 1, 2, 3), True)
            assert fake.starts("a") == 1
            for lease in leases:
                lease.release()
        finally:
            await manager.stop()

    run(scenario())


def test_a_linger_restarted_before_its_wake_asks_for_no_other_wake(tmp_path: Path) -> None:
    """Seed 003's compute plan: a backend keeps its share for a linger after its last
    request. Back-to-back requests restart the linger at every end; the wake already
    pending replans then and asks for the next one (issue 47: a wake per request was an
    owner message per request)."""
    clock, wakes = Clock(), []
    planner = ComputePlanner(
        cpus=(0, 1), linger_s=0.2, folder=tmp_path, clock=clock, wake=wakes.append
    )
    a = Server(1)
    planner.env_for(a)  # type: ignore[arg-type]
    start = clock.now
    for _ in range(5):  # requests 40 ms apart: busy, then idle
        a.in_flight = 1
        planner.update([a])  # type: ignore[arg-type]
        a.in_flight = 0
        planner.update([a])  # type: ignore[arg-type]
        clock.now += 0.04
    assert wakes == [pytest.approx(0.2)]  # the first end's; none for the four after
    clock.now = start + 0.21  # that wake: the linger of the last end (+0.16) lasts to +0.36
    planner.update([a])  # type: ignore[arg-type]
    assert wakes == [pytest.approx(0.2), pytest.approx(0.15)]
    assert a.compute is not None and a.compute.busy
    clock.now = start + 0.37
    planner.update([a])  # type: ignore[arg-type]
    assert a.compute is not None and not a.compute.busy
    assert len(wakes) == 2
    planner.close()
