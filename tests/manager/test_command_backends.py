"""Residency rules with `command` backends (a stand-in server script, fast to start)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from juggler.errors import (
    CheckpointMissing,
    LoadFailed,
    ModelNotLoaded,
    RecipeNotInstalled,
    SlotsPinned,
)
from juggler.manager import LoadOptions, Manager, ServerState
from juggler.types import Device, ModelInfo, ModelType

from .conftest import FakeRegistry, Fakes, run, running, settings, until

pytestmark = pytest.mark.slow


def names(manager: Manager) -> list[str]:
    return sorted(s.model_name for s in manager.snapshot())


def test_npu_backends_are_mutually_exclusive(fakes: Fakes) -> None:
    """Seed 002: "flm, ryzenai-llm, and whispercpp are mutually exclusive on the NPU. Loading
    a model from one of these backends will automatically evict all NPU models from the
    other backends." (`command` models declared on the NPU; a gpu model stays.)"""
    reg = FakeRegistry(
        fakes.model("flm-llm", device="npu", npu_backend="flm"),
        fakes.model("flm-emb", device="npu", npu_backend="flm", labels=("embeddings",)),
        fakes.model("ryzen", device="npu", npu_backend="ryzenai-llm"),
        fakes.model("whisper", device="npu", npu_backend="whispercpp", labels=("transcription",)),
        fakes.model("gpu", device="gpu"),
        fakes.model("own-npu", device="npu"),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=-1), reg) as m:
            for name in ("gpu", "flm-llm", "flm-emb"):
                await m.load(name)
            assert names(m) == ["flm-emb", "flm-llm", "gpu"]
            snap = await m.load("ryzen")
            assert snap.device & Device.NPU
            assert names(m) == ["gpu", "ryzen"]
            await m.load("whisper")
            assert names(m) == ["gpu", "whisper"]
            await m.load("own-npu")  # a command model on the NPU holds it alone
            assert names(m) == ["gpu", "own-npu"]
            assert fakes.alive() == ["gpu", "own-npu"]

    run(scenario())


def test_flm_co_residency(fakes: Fakes) -> None:
    """Seed 002: "flm supports loading 1 ASR model, 1 LLM, and 1 embedding model on the NPU
    at the same time." """
    reg = FakeRegistry(
        fakes.model("llm1", device="npu", npu_backend="flm"),
        fakes.model("llm2", device="npu", npu_backend="flm"),
        fakes.model("emb", device="npu", npu_backend="flm", labels=("embeddings",)),
        fakes.model("asr", device="npu", npu_backend="flm", labels=("audio",)),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=-1), reg) as m:
            for name in ("llm1", "emb", "asr"):
                await m.load(name)
            assert names(m) == ["asr", "emb", "llm1"]
            await m.load("llm2")
            assert names(m) == ["asr", "emb", "llm2"]

    run(scenario())


def test_pinning_and_slots_pinned(fakes: Fakes) -> None:
    """Seed 002: "If all loaded models of a type are pinned and a request to load another
    model of that type is received, the load request fails with a 409 Conflict HTTP status
    containing a slots_pinned_error code. You must unpin or unload at least one model of
    that type to free up a slot." """
    reg = FakeRegistry(fakes.model("a"), fakes.model("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            snap = await m.load("a", LoadOptions(pinned=True))
            assert snap.pinned and snap.to_health()["pinned"] is True
            assert m.slots_all_pinned(ModelType.LLM)
            with pytest.raises(SlotsPinned) as err:
                await m.load("b")
            assert err.value.status == 409 and err.value.code == "slots_pinned_error"
            with pytest.raises(SlotsPinned):
                await m.acquire("b")
            assert names(m) == ["a"]
            await m.pin("a", False)
            await m.load("b")
            assert names(m) == ["b"]
            with pytest.raises(ModelNotLoaded):
                await m.pin("a", True)

    run(scenario())


def test_unload_one_all_and_404(fakes: Fakes) -> None:
    """Seed 000: "When this is provided, unload that specific WrappedServer. Return a 404 if
    `model_name` is not loaded. When no `model_name` is provided, unload all WrappedServers." """
    reg = FakeRegistry(fakes.model("a"), fakes.model("e", labels=("embeddings",)))

    async def scenario() -> None:
        async with running(settings(), reg) as m:
            await m.load("a")
            await m.load("e")
            with pytest.raises(ModelNotLoaded, match="Model not loaded: zzz") as err:
                await m.unload("zzz")
            assert err.value.status == 404
            assert await m.unload("a") == ["a"]
            assert fakes.alive() == ["e"]
            await m.load("a")
            assert sorted(await m.unload(None)) == ["a", "e"]
            assert m.snapshot() == [] and fakes.alive() == []

    run(scenario())


def test_same_options_noop_other_options_reload(fakes: Fakes) -> None:
    """Issue 4: "the same model already loaded with the same options is a no-op that
    refreshes its last use (an explicit `/load` with different options reloads it)" """
    reg = FakeRegistry(fakes.model("a"))

    async def scenario() -> None:
        async with running(settings(), reg) as m:
            first = await m.load("a")
            again = await m.load("a", LoadOptions(pinned=True))
            assert again.pid == first.pid and again.last_use > first.last_use and again.pinned
            reloaded = await m.load("a", LoadOptions(ctx_size=1024))
            assert reloaded.pid != first.pid and reloaded.options.ctx_size == 1024
            assert reloaded.num_loads == 2 and fakes.alive() == ["a"]

    run(scenario())


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


def test_missing_file_evicts_nothing(fakes: Fakes, tmp_path: Path) -> None:
    """Seed 000: "Exceptions to the policy: Do not evict models if the WrappedServer failed
    to load because a file was not found on disk." (also a vendor recipe not installed)"""
    missing = fakes.model("missing", checkpoint=str(tmp_path / "gone.gguf"))
    llama = ModelInfo(name="llama-missing", checkpoint=str(tmp_path / "nope.gguf"))
    vendor = ModelInfo(name="vendor", checkpoint="x:1b", recipe="flm")
    reg = FakeRegistry(fakes.model("a"), missing, llama, vendor)

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            before = await m.load("a")
            for name in ("missing", "llama-missing"):
                with pytest.raises(CheckpointMissing) as err:
                    await m.acquire(name)
                assert err.value.status == 404
            with pytest.raises(RecipeNotInstalled, match="not installed"):
                await m.load("vendor")
            after = m.snapshot()
            assert [(s.model_name, s.pid) for s in after] == [("a", before.pid)]
            assert m.stats().get("evictions", 0) == 0

    run(scenario())


def test_busy_server_not_evicted_until_released(fakes: Fakes) -> None:
    """Seed 000: "If a WrappedServer is busy fulfilling an inference request, we will let it
    finish before evicting it ... The load should queue up indefinitely." """
    reg = FakeRegistry(fakes.model("a"), fakes.model("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            lease = await m.acquire("a")
            loading = asyncio.create_task(m.load("b"))
            await until(lambda: m.stats().get("queued") == 1)
            assert not loading.done() and names(m) == ["a"] and fakes.alive() == ["a"]
            assert m.snapshot()[0].is_busy
            lease.release()
            await loading
            assert names(m) == ["b"] and fakes.alive() == ["b"]

    run(scenario())


def test_request_for_model_being_evicted_reloads_it(fakes: Fakes) -> None:
    """Issue 4: "A request for a model that is being evicted waits and reloads it rather than
    failing." """
    reg = FakeRegistry(fakes.model("a"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            first = await m.acquire("a")
            unloading = asyncio.create_task(m.unload("a"))
            await until(lambda: m.snapshot()[0].status is ServerState.EVICTING)
            second = asyncio.create_task(m.acquire("a"))
            await until(lambda: m.stats().get("queued") == 1)
            assert not second.done()
            first.release()
            assert await unloading == ["a"]
            async with await second as lease:
                assert lease.pid != first.pid
                async with httpx.AsyncClient(trust_env=False) as client:
                    r = await client.post(lease.backend_url + "/v1/chat/completions", json={})
                assert r.status_code == 200

    run(scenario())


def test_auto_load_protection(fakes: Fakes) -> None:
    """Seed 000: "If a WrappedServer is being auto-loaded for an inference request, make sure
    that the inference request has a chance to start and finish before this WrappedServer
    can be evicted" """
    reg = FakeRegistry(fakes.model("a", args="--startup-delay 0.3"), fakes.model("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            request = asyncio.create_task(m.acquire("a"))
            await until(lambda: m.stats().get("queued") == 1)  # a is loading
            other = asyncio.create_task(m.load("b"))  # queued behind; wants a's slot
            lease = await request
            assert lease.model_name == "a" and not other.done()
            async with httpx.AsyncClient(trust_env=False) as client:
                r = await client.post(lease.backend_url + "/v1/chat/completions", json={})
            assert r.json()["model"] == "a"
            lease.release()
            await other
            assert names(m) == ["b"]

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


def test_auto_evict_unloads_idle_servers_but_not_busy_ones(fakes: Fakes) -> None:
    """Seed 002: "after evict_idle_timeout seconds idle ... the model is fully unloaded" and
    "Models currently processing inference requests cannot be evicted until they finish." """
    reg = FakeRegistry(fakes.model("busy"), fakes.model("idle"), fakes.model("plain"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=-1), reg) as m:
            await m.load("plain")  # auto_evict is off by default
            await m.load("busy", LoadOptions(auto_evict=True, evict_idle_timeout=1.0))
            lease = await m.acquire("busy")
            await m.load("idle", LoadOptions(auto_evict=True, evict_idle_timeout=0.2))
            await until(lambda: names(m) == ["busy", "plain"])
            assert m.stats()["idle_evictions"] == 1
            lease.release()
            await until(lambda: names(m) == ["plain"])

    run(scenario())


def test_cancelled_request_while_loading_leaks_no_in_flight(fakes: Fakes) -> None:
    """Seed 000: busy means "busy fulfilling an inference request" -- a request whose client
    went away during the auto-load holds nothing, so the server stays evictable; and
    releasing a lease twice counts once."""
    reg = FakeRegistry(fakes.model("a", args="--startup-delay 0.2"), fakes.model("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            gone = asyncio.create_task(m.acquire("a"))
            await until(lambda: m.stats().get("queued") == 1)
            gone.cancel()
            async with await m.acquire("a") as lease:
                lease.release()  # twice: once here, once on leaving the block
            await until(lambda: m.snapshot()[0].in_flight == 0)
            await m.load("b")  # not blocked by a leaked request
            assert names(m) == ["b"]

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


def test_lowered_limit_applies_at_next_load(fakes: Fakes) -> None:
    """Seed 002: "Configure via lemonade config set max_loaded_models=N" -- a runtime change
    (POST /internal/set) evicts nothing at once; the type's next load evicts down to it."""
    reg = FakeRegistry(*(fakes.model(n) for n in ("a", "b", "c", "d")))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg) as m:
            for name in ("a", "b", "c"):
                await m.load(name)
            await m.set_max_loaded_models(1)
            assert m.max_models()["llm"] == 1 and names(m) == ["a", "b", "c"]
            await m.load("d")
            assert names(m) == ["d"] and fakes.alive() == ["d"]

    run(scenario())


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
