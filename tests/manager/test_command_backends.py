"""Real backend processes with `command` models (fake_backend.py, a stand-in server that
starts fast): what the fast owner tests (fake spawner) cannot show -- spawning, health
polling, exits with their log, SIGKILL and SIGSTOP, and no process left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from juggler.errors import LoadFailed
from juggler.logbook import LogBook
from juggler.manager import Manager, ServerState
from juggler.types import Device, ModelInfo

from .conftest import FakeRegistry, Fakes, resolve_path, run, running, settings, until

pytestmark = pytest.mark.slow


def names(manager: Manager) -> list[str]:
    return sorted(s.model_name for s in manager.snapshot())


def test_failing_load_evicts_all_and_retries(fakes: Fakes) -> None:
    """Seed 000: "If we attempt to load a new WrappedServer of TYPE into an available slot,
    and the load fails for almost any reason (see exceptions below), evict all
    WrappedServers of every type, then re-attempt loading the new WrappedServer." """
    reg = FakeRegistry(
        fakes.model("a"),
        fakes.model("e", labels=("embeddings",)),
        fakes.model("greedy", args="--fail-if-others"),  # "out of memory" while others live
        fakes.model("broken", args="--fail 'weights are corrupt'"),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg) as m:
            await m.load("a")
            await m.load("e")
            snap = await m.load("greedy")
            assert snap.status is ServerState.READY
            assert names(m) == ["greedy"] and fakes.alive() == ["greedy"]
            assert m.stats()["load_failures"] == 1
            await m.load("a")
            with pytest.raises(LoadFailed, match="weights are corrupt") as err:
                await m.load("broken")
            assert err.value.status == 500
            assert m.snapshot() == [] and m.stats()["load_failures"] == 3

    run(scenario())


def test_backend_that_never_becomes_healthy_times_out_and_is_killed(fakes: Fakes) -> None:
    """Settings: "Seconds a backend may take to become healthy." -- past `load_timeout_s`
    the load fails with the backend's output, and its process is gone."""
    reg = FakeRegistry(fakes.model("slow", args="--startup-delay 30"))

    async def scenario() -> None:
        async with running(settings(load_timeout_s=0.5), reg) as m:
            with pytest.raises(LoadFailed, match="did not become healthy"):
                await m.load("slow")
            assert m.snapshot() == [] and fakes.alive() == []

    run(scenario())


def test_ten_concurrent_loads_never_overlap(fakes: Fakes) -> None:
    """Seed 000: "WrappedServer loads shall be serialized (i.e., never attempt loading two or
    more WrappedServers at the same time)." -- ten at once end in a consistent table."""
    models = [fakes.model(f"m{i}", args="--startup-delay 0.05") for i in range(10)]
    reg = FakeRegistry(*models)

    async def one(m: Manager, i: int) -> None:
        if i % 2:
            await m.load(f"m{i}")
        else:
            lease = await m.acquire(f"m{i}")
            lease.release()

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg) as m:
            await asyncio.gather(*(one(m, i) for i in range(10)))
            await until(lambda: not any(s.is_busy for s in m.snapshot()))
            snap = m.snapshot()
            assert len(snap) == 3 and len({s.model_name for s in snap}) == 3
            assert all(s.status is ServerState.READY for s in snap)
            assert sorted(s.model_name for s in snap) == fakes.alive()
            assert m.stats()["loads"] == 10 and m.stats()["queued"] == 0
        loading: set[int] = set()
        resident: set[int] = set()
        for _, pid, _, what in sorted(fakes.events()):
            if what == "spawn":
                assert not loading, "two loads overlapped"
                assert len(resident) <= 2, "a load started before its victim was gone"
                loading.add(pid)
                resident.add(pid)
            elif what == "ready":
                loading.discard(pid)
            else:
                resident.discard(pid)

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_killed_backend_is_noticed_and_slot_freed(fakes: Fakes) -> None:
    """Issue 4 tests: "a backend killed with SIGKILL is noticed and its slot freed" """
    reg = FakeRegistry(fakes.model("a"), fakes.model("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            snap = await m.load("a")
            assert snap.pid is not None
            os.kill(snap.pid, signal.SIGKILL)
            await until(lambda: m.snapshot() == [])
            assert m.stats()["backend_deaths"] == 1
            await m.load("b")
            assert m.stats().get("evictions", 0) == 0

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_unresponsive_backend_reported_by_router_is_dropped(fakes: Fakes) -> None:
    """ARCHITECTURE: "`BackendDead` means the backend process is gone and the manager must
    drop it from the table." -- a backend that stops answering (SIGSTOP) is probed after
    the router reports it, then stopped, and the next request loads a fresh one."""
    reg = FakeRegistry(fakes.model("a"))

    async def scenario() -> None:
        async with running(settings(), reg) as m:
            lease = await m.acquire("a")
            assert lease.pid is not None
            os.kill(lease.pid, signal.SIGSTOP)
            lease.release()
            await m.report_backend_failure(lease)
            await until(lambda: m.snapshot() == [])
            async with await m.acquire("a") as fresh:
                assert fresh.pid != lease.pid

    run(scenario())


_ORPHAN_SCRIPT = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.manager.conftest import Fakes, FakeRegistry, running, settings
from pathlib import Path

async def main():
    fakes = Fakes(Path(sys.argv[2]))
    async with running(settings(), FakeRegistry(fakes.model("orphan"))) as m:
        snap = await m.load("orphan")
        print(snap.pid, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def test_backends_die_with_a_killed_router(fakes: Fakes) -> None:
    """Every test ends the processes it starts -- and a router killed with SIGKILL leaves
    no backend behind (the kernel ends children whose parent died)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT, str(root), str(fakes.state_dir)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        backend_pid = int(proc.stdout.readline())
        assert fakes.alive() == ["orphan"]
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    async def gone() -> None:
        await until(lambda: fakes.alive() == [])

    run(gone())
    assert backend_pid > 0


def test_vendor_presets_run_their_executables(
    fakes: Fakes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 002: "flm supports loading 1 ASR model, 1 LLM, and 1 embedding model on the NPU at
    the same time." and "whispercpp supports loading exactly 1 ASR model at a time, which
    uses the entire NPU." -- through the `flm` and `whispercpp` presets, with stand-in
    executables on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = Path(__file__).with_name("fake_backend.py")
    shims = {
        # flm serve TAG --port P
        "flm": f'exec {sys.executable} {fake} --port "$4" --name "flm-$2"',
        # whisper-server -m PATH --host H --port P
        "whisper-server": f'exec {sys.executable} {fake} --port "$6" --name whisper',
    }
    for exe, line in shims.items():
        path = bin_dir / exe
        path.write_text(f"#!/bin/sh\n{line} --state-dir {fakes.state_dir}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    weights = tmp_path / "ggml-tiny.bin"
    weights.write_bytes(b"x")
    reg = FakeRegistry(
        ModelInfo(name="flm-llm", checkpoint="llm", recipe="flm"),
        ModelInfo(name="flm-emb", checkpoint="emb", recipe="flm", labels=("embeddings",)),
        ModelInfo(
            name="whisper", checkpoint=str(weights), recipe="whispercpp", labels=("transcription",)
        ),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=-1), reg) as m:
            await m.load("flm-llm")
            emb = await m.load("flm-emb")
            assert emb.device == Device.NPU and emb.recipe == "flm"
            assert fakes.alive() == ["flm-emb", "flm-llm"]
            await m.load("whisper")
            assert names(m) == ["whisper"] and fakes.alive() == ["whisper"]

    run(scenario())


def test_backend_output_reaches_its_log_file_and_the_logbook(fakes: Fakes) -> None:
    """Issue 15: the dashboard shows each backend's output; a failed load still quotes the
    backend's last words (read back from its log file after the pipe drained)."""
    reg = FakeRegistry(fakes.model("a"), fakes.model("broken", args="--fail 'weights are corrupt'"))
    book = LogBook()

    async def scenario() -> None:
        manager = Manager(settings(), reg, resolve=resolve_path, logbook=book)
        await manager.start()
        try:
            await manager.load("a")
            with pytest.raises(LoadFailed, match="weights are corrupt"):
                await manager.load("broken")
            log_dir = manager.log_dir
            assert log_dir is not None
            logs = {p.name: p.read_text() for p in log_dir.iterdir()}
        finally:
            await manager.stop()
        assert any("weights are corrupt" in text for name, text in logs.items() if "broken" in name)
        broken, _ = book.query(source="broken")
        assert [line.text for line in broken][0].startswith("[juggler] backend started: pid ")
        assert "weights are corrupt" in [line.text for line in broken]
        assert book.query(source="a")[0]

    run(scenario())
