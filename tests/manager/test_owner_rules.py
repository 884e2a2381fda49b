"""The residency rules through the Manager and its owner task, with the fake spawner: no
processes, milliseconds each. Each test quotes the rule it pins."""

from __future__ import annotations

import asyncio

import pytest

from juggler.errors import ModelNotLoaded, SlotsPinned
from juggler.manager import Manager
from juggler.types import Device, ModelType

from .conftest import FakeRegistry, run, running, settings, stub, until
from .fake_spawner import FakeSpawner


def names(manager: Manager) -> list[str]:
    return sorted(s.model_name for s in manager.snapshot())


async def soon(predicate: object) -> None:
    await until(predicate, step_s=0.001)  # type: ignore[arg-type]


def before(spawner: FakeSpawner, first: tuple[str, str], then: tuple[str, str]) -> bool:
    """Whether event `first` (what, name) was recorded before event `then`."""
    seen = [(what, name) for what, name, _ in spawner.events]
    return seen.index(first) < seen.index(then)


def test_lru_evicts_least_recent_of_its_type() -> None:
    """Seed 000: "If a slot of TYPE is not available, evict (unload) the least-recently-used
    WrappedServer of TYPE, then attempt to load the new WrappedServer." and "Types of access
    that should update the timestamp: ... When an inference request ... starts and
    completes." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"), stub("c"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=2), reg, fake) as m:
            await m.load("a")
            await m.load("b")
            async with await m.acquire("a"):  # a request makes a the recent one
                pass
            await m.load("c")
            assert names(m) == ["a", "c"] and fake.alive() == ["a", "c"]
            assert before(fake, ("stop", "b"), ("start", "c"))
            most_recent = m.most_recent()
            assert most_recent is not None and most_recent.model_name == "c"
            (await m.acquire("b")).release()  # an auto-load evicts a, now the LRU
            assert names(m) == ["b", "c"]

    run(scenario())


def test_each_type_has_its_own_slots() -> None:
    """Seed 000: "we will consider `embedding` and `reranking` models as separate types from
    chat `llm`" -- an embedding load evicts an embedding model, never the LLM."""
    fake = FakeSpawner()
    reg = FakeRegistry(
        stub("chat"), stub("e1", labels=("embeddings",)), stub("e2", labels=("embeddings",))
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            chat = await m.load("chat")
            await m.load("e1")
            e2 = await m.load("e2")
            assert e2.type is ModelType.EMBEDDING and e2.to_health()["type"] == "embedding"
            assert names(m) == ["chat", "e2"] and fake.process("chat").pid == chat.pid

    run(scenario())


def test_loads_are_serialized_and_victims_leave_first() -> None:
    """Seed 000: "WrappedServer loads shall be serialized (i.e., never attempt loading two or
    more WrappedServers at the same time)." -- ten at once, each held until released."""
    fake = FakeSpawner()
    reg = FakeRegistry(*(stub(f"m{i}") for i in range(10)))
    gates = {f"m{i}": fake.hold(f"m{i}") for i in range(10)}

    async def one(m: Manager, i: int) -> None:
        if i % 2:
            await m.load(f"m{i}")
        else:
            (await m.acquire(f"m{i}")).release()

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg, fake) as m:
            everyone = asyncio.gather(*(one(m, i) for i in range(10)))
            for k in range(1, 11):
                await soon(lambda: fake.starts() == k)  # noqa: B023 (awaited here)
                _, name, _ = [e for e in fake.events if e[0] == "start"][-1]
                gates[name].set()
            await everyone
            assert fake.max_loading == 1
            assert len(m.snapshot()) == 3 and names(m) == fake.alive()
            assert m.stats()["loads"] == 10 and m.stats()["queued"] == 0
        resident: set[int] = set()
        for what, _, pid in fake.events:
            if what == "start":
                assert len(resident) <= 2, "a load started before its victim was gone"
                resident.add(pid)
            elif what == "stop":
                resident.discard(pid)

    run(scenario())


def test_victims_are_chosen_when_a_load_leaves_the_queue() -> None:
    """Seed 000: "make the eviction policy choices when starting the load for a specific
    WrappedServer (i.e., make the choices when the WrappedServer is exiting the queue, not
    when its entering the queue)." -- y is queued while x loads (nothing resident yet);
    x is y's victim once y leaves the queue."""
    fake = FakeSpawner()
    reg = FakeRegistry(stub("x"), stub("y"))
    gate = fake.hold("x")

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            x = asyncio.create_task(m.load("x"))
            await soon(lambda: fake.num_loading == 1)
            y = asyncio.create_task(m.load("y"))
            await soon(lambda: m.stats()["queued"] == 2)
            gate.set()
            await x
            await y
            assert names(m) == ["y"] and before(fake, ("stop", "x"), ("start", "y"))

    run(scenario())


def test_busy_server_is_not_evicted_until_its_request_ends() -> None:
    """Seed 000: "If a WrappedServer is busy fulfilling an inference request, we will let it
    finish before evicting it ... The load should queue up indefinitely." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            lease = await m.acquire("a")
            loading = asyncio.create_task(m.load("b"))
            await soon(lambda: m.stats()["queued"] == 1)
            for _ in range(50):  # the owner handles other messages meanwhile
                await asyncio.sleep(0)
            assert not loading.done() and fake.starts("b") == 0 and m.snapshot()[0].is_busy
            lease.release()
            await loading
            assert names(m) == ["b"] and fake.alive() == ["b"]

    run(scenario())


def test_auto_loaded_model_serves_its_request_before_eviction() -> None:
    """Seed 000: "If a WrappedServer is being auto-loaded for an inference request, make sure
    that the inference request has a chance to start and finish before this WrappedServer
    can be evicted" """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))
    gate = fake.hold("a")

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            request = asyncio.create_task(m.acquire("a"))
            await soon(lambda: fake.num_loading == 1)
            other = asyncio.create_task(m.load("b"))  # queued behind; wants a's slot
            await soon(lambda: m.stats()["queued"] == 2)
            gate.set()
            lease = await request
            assert lease.model_name == "a" and lease.backend_url == fake.process("a").url
            await soon(lambda: m.stats()["queued"] == 1)
            assert not other.done() and names(m) == ["a"]
            lease.release()
            await other
            assert names(m) == ["b"]

    run(scenario())


def test_all_pinned_refuses_with_409() -> None:
    """Seed 002: "If all loaded models of a type are pinned and a request to load another
    model of that type is received, the load request fails with a 409 Conflict HTTP status
    containing a slots_pinned_error code. You must unpin or unload at least one model of
    that type to free up a slot." """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"), stub("b"))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg, fake) as m:
            snap = await m.load("a", pinned=True)
            assert snap.pinned and snap.to_health()["pinned"] is True
            assert m.slots_all_pinned(ModelType.LLM)
            assert not m.slots_all_pinned(ModelType.EMBEDDING)
            with pytest.raises(SlotsPinned) as err:
                await m.load("b")
            assert err.value.status == 409 and err.value.code == "slots_pinned_error"
            with pytest.raises(SlotsPinned):
                await m.acquire("b")
            assert names(m) == ["a"] and fake.starts("b") == 0
            await m.pin("a", False)
            await m.load("b")
            assert names(m) == ["b"]
            with pytest.raises(ModelNotLoaded):
                await m.pin("a", True)

    run(scenario())


def test_npu_backends_are_mutually_exclusive() -> None:
    """Seed 002: "flm, ryzenai-llm, and whispercpp are mutually exclusive on the NPU. Loading
    a model from one of these backends will automatically evict all NPU models from the
    other backends." and "flm supports loading 1 ASR model, 1 LLM, and 1 embedding model on
    the NPU at the same time." """
    fake = FakeSpawner()
    reg = FakeRegistry(
        stub("flm-llm", device="npu", npu_backend="flm"),
        stub("flm-llm2", device="npu", npu_backend="flm"),
        stub("flm-emb", device="npu", npu_backend="flm", labels=("embeddings",)),
        stub("ryzen", device="npu", npu_backend="ryzenai-llm"),
        stub("whisper", device="npu", npu_backend="whispercpp", labels=("transcription",)),
        stub("gpu"),
        stub("own-npu", device="npu"),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=-1), reg, fake) as m:
            for name in ("gpu", "flm-llm", "flm-emb"):
                await m.load(name)
            assert names(m) == ["flm-emb", "flm-llm", "gpu"]
            await m.load("flm-llm2")  # one flm LLM at a time
            assert names(m) == ["flm-emb", "flm-llm2", "gpu"]
            snap = await m.load("ryzen")
            assert snap.device & Device.NPU and names(m) == ["gpu", "ryzen"]
            await m.load("whisper")
            assert names(m) == ["gpu", "whisper"]
            await m.load("own-npu")  # a command model on the NPU holds it alone
            assert names(m) == ["gpu", "own-npu"] and fake.alive() == ["gpu", "own-npu"]

    run(scenario())


def test_lowered_limit_applies_at_next_load() -> None:
    """Seed 002: "Configure via lemonade config set max_loaded_models=N" -- a runtime change
    evicts nothing at once; the type's next load evicts down to it."""
    fake = FakeSpawner()
    reg = FakeRegistry(*(stub(n) for n in ("a", "b", "c", "d")))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=3), reg, fake) as m:
            for name in ("a", "b", "c"):
                await m.load(name)
            await m.set_max_loaded_models(1)
            assert m.max_models()["llm"] == 1 and names(m) == ["a", "b", "c"]
            await m.load("d")
            assert names(m) == ["d"] and fake.alive() == ["d"]

    run(scenario())


def test_same_options_noop_other_options_reload() -> None:
    """Issue 4: "the same model already loaded with the same options is a no-op that
    refreshes its last use (an explicit `/load` with different options reloads it)" """
    fake = FakeSpawner()
    reg = FakeRegistry(stub("a"))

    async def scenario() -> None:
        async with running(settings(), reg, fake) as m:
            first = await m.load("a")
            again = await m.load("a", {"evict_idle_timeout": 500}, pinned=True)
            assert again.pid == first.pid and again.last_use > first.last_use and again.pinned
            assert again.options.evict_idle_timeout == 500
            reloaded = await m.load("a", {"ctx_size": 1024})
            assert reloaded.pid != first.pid and reloaded.options.ctx_size == 1024
            assert reloaded.server_id != first.server_id
            assert reloaded.num_loads == 2 and fake.alive() == ["a"]

    run(scenario())
