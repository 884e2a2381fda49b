"""Seed 004's metrics under vLLM's names: one unlabelled server-wide series per family."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from juggler.router.metrics import BackendFigures, MetricsView, exposition


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        f.name: [(dict(s.labels), s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_server_wide_series_sum_backends_and_router_waits() -> None:
    """Seed 004: TotalQueuedRequests `vllm:num_requests_waiting`; KVCacheUtilization
    (seeds README: `vllm:kv_cache_usage_perc` as a 0..1 fraction), one series per family."""
    view = MetricsView(
        backends=(
            BackendFigures("a", "llm", "cpu", running=3, waiting=1, kv_used=100, kv_total=400),
            BackendFigures("b", "llm", "cpu", running=1, waiting=2, kv_used=300, kv_total=400),
        ),
        router_waiting=4,
        counters={"loads": 2, "queued": 1},
    )
    got = families(exposition(view).decode())
    assert got["vllm:num_requests_waiting"] == [({}, 7.0)]
    assert got["vllm:num_requests_running"] == [({}, 4.0)]
    assert got["vllm:kv_cache_usage_perc"] == [({}, 0.5)]
    assert got["vllm:cache_config_info"][0][0]["num_gpu_blocks"] == "800"
    per_model = dict((labels["model"], v) for labels, v in got["juggler:model_kv_cache_usage_perc"])
    assert per_model == {"a": 0.25, "b": 0.75}
    assert got["juggler:loads"] == [({}, 2.0)]  # counter family name drops _total


def test_no_backends_is_all_zero_and_still_parses() -> None:
    got = families(exposition(MetricsView()).decode())
    assert got["vllm:num_requests_waiting"] == [({}, 0.0)]
    assert got["vllm:kv_cache_usage_perc"] == [({}, 0.0)]
