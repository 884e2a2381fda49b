"""Issue 48's VRAM in residency: pure policy decisions, then the owner carrying them out
on the fake spawner with a fake GPU memory source (unit tests only). Issue 48: "when a
new model does not fit, the least recently used idle models on that GPU are evicted
(busy and pinned ones never), exactly as seed 000's rules do for slots"."""

from __future__ import annotations

from pathlib import Path

from juggler.manager import Manager
from juggler.manager.memory import MemorySample
from juggler.manager.offload import GPU_RUNTIME_BYTES
from juggler.manager.policy import Decision, LoadRequest, ServerView, Verdict, VramState, decide
from juggler.manager.pressure import MemoryView, Step, relief_step
from juggler.types import MODEL_TYPE_ORDER, Device, ModelInfo, ModelType

from .conftest import FakeRegistry, resolve_path, run, settings
from .fake_spawner import FakeSpawner
from .test_offload import layered

LLM, EMB = ModelType.LLM, ModelType.EMBEDDING
GIB = 1 << 30
UNLIMITED = dict.fromkeys(MODEL_TYPE_ORDER, -1)


def srv(name: str, last_use: float, vram: int, *, busy: bool = False, pinned: bool = False,
        type: ModelType = LLM) -> ServerView:  # fmt: skip
    return ServerView(name, type, Device.GPU, last_use, None, int(busy), pinned, "k", vram)


def need(name: str, vram: int, type: ModelType = LLM) -> LoadRequest:
    return LoadRequest(name, type, Device.GPU, vram_bytes=vram)


def test_a_load_that_fits_in_free_vram_evicts_nothing() -> None:
    table = [srv("a", 1.0, 10 * GIB)]
    assert decide(need("b", 5 * GIB), table, UNLIMITED, vram=VramState(6 * GIB)) == Decision(
        Verdict.LOAD
    )


def test_lru_idle_models_on_the_gpu_are_evicted_until_the_load_fits() -> None:
    table = [srv("old", 1.0, 4 * GIB), srv("mid", 2.0, 4 * GIB), srv("new", 3.0, 4 * GIB),
             ServerView("cpu", LLM, Device.CPU, 0.5, launch_key="k")]  # fmt: skip
    got = decide(need("big", 10 * GIB), table, UNLIMITED, vram=VramState(3 * GIB))
    assert got == Decision(Verdict.LOAD, ("old", "mid")), "a CPU model holds no VRAM"
    # Other types on the GPU are evicted too: the GPU is one memory for all of them.
    mixed = [srv("emb", 1.0, 4 * GIB, type=EMB), srv("llm", 2.0, 4 * GIB)]
    assert decide(need("big", 6 * GIB), mixed, UNLIMITED, vram=VramState(3 * GIB)).victims == (
        "emb",
    )


def test_pinned_models_are_never_evicted_and_busy_ones_are_waited_for() -> None:
    table = [srv("pinned", 0.5, 8 * GIB, pinned=True), srv("busy", 1.0, 4 * GIB, busy=True),
             srv("idle", 2.0, 4 * GIB)]  # fmt: skip
    # Idle ones go first (a busy one counts as used now), then the busy one is waited for.
    assert decide(need("x", 5 * GIB), table, UNLIMITED, vram=VramState(2 * GIB)).victims == (
        "idle",
    )
    wait = decide(need("x", 9 * GIB), table, UNLIMITED, vram=VramState(2 * GIB))
    assert wait.verdict is Verdict.WAIT and wait.waiting_for == ("busy",)
    # Not even every unpinned one would make room: none is evicted for it.
    assert decide(need("x", 30 * GIB), table, UNLIMITED, vram=VramState(2 * GIB)) == Decision(
        Verdict.LOAD
    )


def test_slot_victims_count_toward_the_room_and_unknown_vram_evicts_nothing() -> None:
    table = [srv("a", 1.0, 6 * GIB), srv("b", 2.0, 6 * GIB)]
    one_slot = dict.fromkeys(MODEL_TYPE_ORDER, 2)
    assert decide(need("c", 8 * GIB), table, one_slot, vram=VramState(3 * GIB)).victims == ("a",)
    assert decide(need("c", 80 * GIB), table, UNLIMITED) == Decision(Verdict.LOAD)


def test_a_gpu_load_waits_for_gpu_evictions_in_progress() -> None:
    evicting = [srv("going", 1.0, 8 * GIB, type=EMB)]
    got = decide(need("x", GIB), [], UNLIMITED, evicting, VramState(GIB))
    assert got.verdict is Verdict.WAIT and got.waiting_for == ("going",)
    cpu = decide(LoadRequest("y", LLM, Device.CPU), [], UNLIMITED, evicting)
    assert cpu.verdict is Verdict.LOAD, "a CPU load of another type does not wait"


def test_gpu_memory_pressure_is_relieved_by_models_on_the_gpu() -> None:
    """Issue 48: "seed 002's memory management watches VRAM the way it watches RAM
    (downsize frees VRAM, and says how much)"."""
    base = {"opted_in": True, "downsizable_bytes": 1 << 20}
    cpu = MemoryView("cpu", last_use=0.0, **base)  # type: ignore[arg-type]
    gpu = MemoryView("gpu", last_use=5.0, vram_bytes=6 * GIB, downsizable_vram_bytes=2 * GIB,
                     **base)  # type: ignore[arg-type]  # fmt: skip
    sample = MemorySample(int(9.5 * GIB), 10 * GIB)
    step = relief_step([cpu, gpu], sample, 0.9, 10.0, "gpu")
    assert step is not None and (step.step, step.model_name) == (Step.DOWNSIZE, "gpu")
    tight = MemorySample(int(9.95 * GIB), 10 * GIB)  # 2 GiB over: a downsize is not enough
    evict = relief_step([cpu, gpu], tight, 0.5, 10.0, "gpu")
    assert evict is not None and (evict.step, evict.model_name) == (Step.EVICT, "gpu")
    host = relief_step([cpu, gpu], sample, 0.9, 10.0, "host")
    assert host is not None and host.model_name == "cpu", "host memory: the oldest of all"


class FakeVram:
    """A GPU of `total` bytes holding what the fake backends' plans say they need."""

    name = "fakegpu"
    kind = "gpu"

    def __init__(self, spawner: FakeSpawner, total: int) -> None:
        self.spawner = spawner
        self.total = total

    def process_bytes(self) -> dict[int, int]:
        return {
            p.pid: p.plan.vram_bytes
            for p in self.spawner.processes
            if p.is_alive and p.plan is not None and p.pid is not None
        }

    def sample(self) -> MemorySample:
        return MemorySample(sum(self.process_bytes().values()), self.total)


def test_a_model_that_does_not_fit_in_vram_evicts_the_lru_idle_one(tmp_path: Path) -> None:
    """Issue 48 (goals): "two models that do not fit together evict by LRU instead of
    failing". Two slots for LLMs, so only VRAM makes room: each model fits the GPU alone,
    any two do not; the least recently used idle one leaves, a pinned one never does."""
    models = [ModelInfo(name=n, checkpoint=str(layered(tmp_path / f"{n}.gguf", 48)))
              for n in ("a", "b", "c")]  # fmt: skip
    fake = FakeSpawner()
    vram = FakeVram(fake, 0)
    cuda = (frozenset({"cuda"}), frozenset({"cuda"}))

    async def scenario() -> None:
        m = Manager(
            settings(max_loaded_models=[3, 1, 1, 1, 1], llamacpp_backend="cuda"),
            FakeRegistry(*models),
            resolve=resolve_path,
            spawner=fake,
            vram_source=vram,
            gpu_backends=cuda,
        )
        await m.start()
        try:
            vram.total = 10**15  # plan against a big GPU: every layer offloaded
            assert (await m.load("a")).device is Device.GPU
            plan = fake.process("a").plan
            assert plan is not None and plan.offload is not None and plan.offload.is_full
            size = plan.vram_bytes
            # One fits, two do not; beside one, another's runtime and half its layers do.
            vram.total = size + GPU_RUNTIME_BYTES + (size - GPU_RUNTIME_BYTES) // 2
            await m.load("b")
            assert fake.alive() == ["b"], "a (idle, least recently used) was evicted"
            await m.load("a", pinned=True)
            assert fake.alive() == ["a"]
            # Only the pinned one holds the GPU: c gets the layers that fit beside it.
            await m.load("c")
            assert fake.alive() == ["a", "c"], "the pinned model stays"
            c = fake.process("c").plan
            assert c is not None and c.offload is not None and not c.offload.is_full
            assert 0 < c.vram_bytes <= vram.total - size
        finally:
            await m.stop()

    run(scenario())
