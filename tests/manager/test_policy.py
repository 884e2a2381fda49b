"""Pure eviction-policy tests: no processes, no clock; each quotes the rule it pins."""

from __future__ import annotations

from juggler.errors import CheckpointMissing, LoadFailed, RecipeNotInstalled
from juggler.manager.policy import (
    Decision,
    LoadRequest,
    ServerView,
    Verdict,
    all_slots_pinned,
    decide,
    retry_after_failure,
)
from juggler.manager.recipes import NpuBackend
from juggler.types import MODEL_TYPE_ORDER, Device, ModelType

LLM, EMB, RERANK, AUDIO = ModelType.LLM, ModelType.EMBEDDING, ModelType.RERANKING, ModelType.AUDIO
FLM = NpuBackend.FLM


def limits(n: int = 1, **per_type: int) -> dict[ModelType, int]:
    out = dict.fromkeys(MODEL_TYPE_ORDER, n)
    out.update({ModelType(k): v for k, v in per_type.items()})
    return out


def srv(
    name: str,
    last_use: float,
    type: ModelType = LLM,
    *,
    device: Device = Device.GPU,
    npu: NpuBackend | None = None,
    in_flight: int = 0,
    pinned: bool = False,
    key: object = "k",
) -> ServerView:
    return ServerView(name, type, device, last_use, npu, in_flight, pinned, key)


def req(
    name: str,
    type: ModelType = LLM,
    *,
    device: Device = Device.GPU,
    npu: NpuBackend | None = None,
    key: object = None,
    evict_all: bool = False,
) -> LoadRequest:
    return LoadRequest(name, type, device, npu, key, evict_all)


def load(*victims: str) -> Decision:
    return Decision(Verdict.LOAD, victims)


def test_free_slot_loads_without_evicting() -> None:
    """Seed 001: "If a slot is available for that TYPE, the new WrappedServer loads without
    evicting existing ones." """
    assert decide(req("b"), [srv("a", 1)], limits(2)) == load()


def test_lru_evicts_oldest_of_same_type() -> None:
    """Seed 001: "If no slot is available, the least-recently-used WrappedServer of that
    TYPE is evicted first." """
    table = [srv("a", 5), srv("b", 3), srv("e", 1, EMB)]
    assert decide(req("c"), table, limits(2)) == load("b")


def test_other_types_never_evicted_for_a_slot() -> None:
    """Seed 000: "we will consider `embedding` and `reranking` models as separate types from
    chat `llm`" -- an embedding load never evicts an LLM."""
    table = [srv("a", 1), srv("r", 0, RERANK), srv("e", 2, EMB)]
    assert decide(req("e2", EMB), table, limits(1)) == load("e")


def test_unlimited_slots_never_evict() -> None:
    """Seed 001: "Use `-1` for unlimited (no LRU eviction)." """
    table = [srv(f"m{i}", i) for i in range(10)]
    assert decide(req("new"), table, limits(-1)) == load()


def test_per_type_limits_from_list() -> None:
    """Seed 000: "If the user puts `--max-loaded-models 5 2 4`, that means: 5x `llm` ...
    2x `embedding` ... 4x `reranking`" """
    table = [srv("e1", 1, EMB), srv("e2", 2, EMB), srv("l1", 0)]
    assert decide(req("e3", EMB), table, limits(1, llm=5, embedding=2)) == load("e1")
    assert decide(req("l2"), table, limits(1, llm=5, embedding=2)) == load()


def test_lowered_limit_evicts_down_to_it_at_next_load() -> None:
    """Seed 001: "The `--max-loaded-models N` argument controls how many WrappedServers can
    be in memory per type slot" -- after a runtime change to 1, three resident LLMs go
    down to one on the next LLM load (the two least recent and the third)."""
    table = [srv("a", 1), srv("b", 2), srv("c", 3)]
    assert decide(req("d"), table, limits(1)) == load("a", "b", "c")


def test_same_model_same_options_is_noop() -> None:
    """Issue 4: "the same model already loaded with the same options is a no-op that
    refreshes its last use" """
    assert decide(req("a", key="k"), [srv("a", 1)], limits(1)).verdict is Verdict.NOOP


def test_auto_load_of_resident_model_is_noop() -> None:
    """Seed 000: "Auto-load means: if an inference request comes in for a model that is not
    loaded" -- one that is loaded, with any options, just serves."""
    assert decide(req("a", key=None), [srv("a", 1, key="x")], limits(1)).verdict is Verdict.NOOP


def test_same_model_other_options_reloads() -> None:
    """Issue 4: "(an explicit `/load` with different options reloads it)" -- the old server
    frees its own slot, so nothing else is evicted."""
    table = [srv("a", 1, key="old"), srv("b", 2)]
    assert decide(req("a", key="new"), table, limits(2)) == load("a")


def test_busy_lru_waits_and_is_not_evicted() -> None:
    """Seed 000: "If a WrappedServer is busy fulfilling an inference request, we will let it
    finish before evicting it ... The load should queue up indefinitely." """
    decision = decide(req("b"), [srv("a", 1, in_flight=1)], limits(1))
    assert decision.verdict is Verdict.WAIT
    assert decision.waiting_for == ("a",)


def test_busy_server_counts_as_used_now() -> None:
    """Seed 001: "A WrappedServer actively fulfilling an inference request cannot be evicted
    until it finishes." -- a server with a request in flight is in use right now, so an idle
    server goes first even when its last use is later."""
    table = [srv("streaming", 1, in_flight=1), srv("idle", 2)]
    assert decide(req("c"), table, limits(2)) == load("idle")


def test_all_pinned_refuses() -> None:
    """Seed 002: "If all loaded models of a type are pinned and a request to load another
    model of that type is received, the load request fails with a 409 Conflict HTTP status
    containing a slots_pinned_error code." """
    decision = decide(req("b"), [srv("a", 1, pinned=True)], limits(1))
    assert decision.verdict is Verdict.REFUSE
    assert "pinned" in decision.reason


def test_pinned_skipped_in_lru_search() -> None:
    """Seed 002: "Pinned models are excluded from the eviction candidate search." """
    table = [srv("old_pinned", 1, pinned=True), srv("newer", 5)]
    assert decide(req("c"), table, limits(2)) == load("newer")


def test_npu_exclusive_between_backends() -> None:
    """Seed 002: "flm, ryzenai-llm, and whispercpp are mutually exclusive on the NPU. Loading
    a model from one of these backends will automatically evict all NPU models from the
    other backends." -- regardless of type or slots."""
    table = [
        srv("f_llm", 1, device=Device.NPU, npu=FLM),
        srv("f_emb", 2, EMB, device=Device.NPU, npu=FLM),
        srv("gpu", 3),
    ]
    request = req("w", AUDIO, device=Device.NPU, npu=NpuBackend.WHISPERCPP)
    assert decide(request, table, limits(-1)) == load("f_llm", "f_emb")


def test_flm_co_residency_one_per_type() -> None:
    """Seed 002: "flm supports loading 1 ASR model, 1 LLM, and 1 embedding model on the NPU
    at the same time." """
    table = [
        srv("f_llm", 1, device=Device.NPU, npu=FLM),
        srv("f_asr", 2, AUDIO, device=Device.NPU, npu=FLM),
    ]
    assert decide(req("f_emb", EMB, device=Device.NPU, npu=FLM), table, limits(-1)) == load()
    assert decide(req("f_llm2", device=Device.NPU, npu=FLM), table, limits(-1)) == load("f_llm")


def test_ryzenai_holds_the_whole_npu() -> None:
    """Seed 002: "ryzenai-llm supports loading exactly 1 LLM, which uses the entire NPU." """
    table = [srv("r1", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)]
    request = req("r2", device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)
    assert decide(request, table, limits(-1)) == load("r1")


def test_whispercpp_one_asr() -> None:
    """Seed 002: "whispercpp supports loading exactly 1 ASR model at a time, which uses the
    entire NPU." """
    table = [srv("w1", 1, AUDIO, device=Device.NPU, npu=NpuBackend.WHISPERCPP)]
    request = req("w2", AUDIO, device=Device.NPU, npu=NpuBackend.WHISPERCPP)
    assert decide(request, table, limits(-1)) == load("w1")


def test_oga_hybrid_evicts_npu_holder_but_not_gpu() -> None:
    """Seed 000: "When a new WrappedServer is being loaded with an NPU recipe, it must check
    whether any other WrappedServer is using the NPU and evict it (regardless of type or
    --max-loaded-models)." -- `oga-hybrid` is gpu|npu; a plain gpu server stays."""
    table = [srv("flm", 1, EMB, device=Device.NPU, npu=FLM), srv("gpu", 2)]
    request = req("hyb", device=Device.GPU | Device.NPU, npu=NpuBackend.OGA)
    assert decide(request, table, limits(-1)) == load("flm")


def test_gpu_load_ignores_npu_servers() -> None:
    """Seed 002: "CPU/GPU: No inherent limits beyond available RAM. Multiple models can
    coexist on CPU or GPU." """
    table = [srv("npu", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)]
    assert decide(req("gpu"), table, limits(2)) == load()


def test_npu_and_slot_victims_combine() -> None:
    """Seed 000: NPU eviction is "regardless of type or --max-loaded-models"; the type's
    slot rule still applies after it -- an NPU victim of the same type frees the slot."""
    table = [srv("gpu_llm", 5), srv("npu_llm", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)]
    request = req("r2", device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)
    assert decide(request, table, limits(2)) == load("npu_llm")


def test_pinned_npu_holder_refuses() -> None:
    """Seed 002: "Pinned models are excluded from the eviction candidate search." -- a
    pinned NPU holder cannot be evicted, so the conflicting load is refused (409)."""
    table = [srv("r1", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM, pinned=True)]
    request = req("w", AUDIO, device=Device.NPU, npu=NpuBackend.WHISPERCPP)
    assert decide(request, table, limits(-1)).verdict is Verdict.REFUSE


def test_busy_npu_holder_waits() -> None:
    """Seed 001: "Busy WrappedServers are protected ... Pending loads queue indefinitely." """
    table = [srv("r1", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM, in_flight=2)]
    request = req("r2", device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)
    assert decide(request, table, limits(-1)).verdict is Verdict.WAIT


def test_evict_all_retry_takes_every_type() -> None:
    """Seed 000: "If we attempt to load a new WrappedServer of TYPE into an available slot,
    and the load fails for almost any reason (see exceptions below), evict all
    WrappedServers of every type, then re-attempt loading the new WrappedServer." """
    table = [srv("a", 1), srv("e", 2, EMB), srv("r", 3, RERANK, pinned=True)]
    assert decide(req("x", evict_all=True), table, limits(5)) == load("a", "e", "r")


def test_evict_all_waits_for_busy() -> None:
    """Seed 000: "If a WrappedServer is busy fulfilling an inference request, we will let it
    finish before evicting it" -- the evict-all retry too."""
    table = [srv("a", 1), srv("e", 2, EMB, in_flight=1)]
    decision = decide(req("x", evict_all=True), table, limits(5))
    assert decision.verdict is Verdict.WAIT and decision.waiting_for == ("e",)


def test_all_slots_pinned_warning() -> None:
    """Seed 002: "If all slots for that model type are occupied by pinned models, the CLI
    will output a pre-emptive warning alerting you that loading will fail." """
    table = [srv("a", 1, pinned=True), srv("b", 2, pinned=True), srv("e", 3, EMB)]
    assert all_slots_pinned(LLM, table, limits(2))
    assert not all_slots_pinned(LLM, table, limits(3))
    assert not all_slots_pinned(EMB, table, limits(1))
    assert not all_slots_pinned(LLM, table, limits(-1))


def test_eviction_of_same_type_holds_up_a_load() -> None:
    """Issue 9: "a slow eviction of an embedding model must not hold up an LLM load" -- but
    a server of the load's own type that is still being evicted holds its slot and memory,
    so that load waits."""
    evicting = [srv("emb", 1, EMB)]
    assert decide(req("b"), [], limits(1), evicting) == load()
    decision = decide(req("e2", EMB), [], limits(1), evicting)
    assert decision.verdict is Verdict.WAIT and decision.waiting_for == ("emb",)
    evicting_llm = [srv("a", 1)]
    assert decide(req("b"), [], limits(-1), evicting_llm).waiting_for == ("a",)


def test_evicting_npu_holder_holds_up_a_conflicting_npu_load() -> None:
    """Seed 002: "flm, ryzenai-llm, and whispercpp are mutually exclusive on the NPU" -- a
    whisper load waits while an NPU LLM is still leaving the NPU; a GPU LLM does not."""
    evicting = [srv("r1", 1, device=Device.NPU, npu=NpuBackend.RYZENAI_LLM)]
    request = req("w", AUDIO, device=Device.NPU, npu=NpuBackend.WHISPERCPP)
    assert decide(request, [], limits(1), evicting).verdict is Verdict.WAIT
    assert decide(req("gpu_emb", EMB), [], limits(1), evicting) == load()


def test_evict_all_retry_waits_for_every_eviction() -> None:
    """Seed 000: "evict all WrappedServers of every type, then re-attempt loading the new
    WrappedServer" -- the retry starts once everything being evicted is gone."""
    decision = decide(req("x", evict_all=True), [srv("a", 2)], limits(5), [srv("e", 1, EMB)])
    assert decision.verdict is Verdict.WAIT and decision.waiting_for == ("e",)


def test_retry_after_failure_except_missing_file() -> None:
    """Seed 000: "If we attempt to load a new WrappedServer of TYPE into an available slot,
    and the load fails for almost any reason (see exceptions below), evict all
    WrappedServers of every type, then re-attempt loading the new WrappedServer.
    [...] Exceptions to the policy: Do not evict models if the WrappedServer failed to load
    because a file was not found on disk." """
    failed = LoadFailed("out of memory")
    assert retry_after_failure(failed, has_retried=False, num_others=2)
    assert not retry_after_failure(failed, has_retried=True, num_others=2)  # once only
    assert not retry_after_failure(failed, has_retried=False, num_others=0)  # nothing to free
    for missing in (CheckpointMissing("gone"), RecipeNotInstalled("no flm")):
        assert not retry_after_failure(missing, has_retried=False, num_others=2)
