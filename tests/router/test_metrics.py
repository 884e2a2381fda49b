"""Seed 004's metrics under vLLM's names: one unlabelled server-wide series per family."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from juggler.api.histogram import TPOT_BUCKETS, TTFT_BUCKETS, Histogram
from juggler.router.core.figures import BackendFigures, Totals, parse_stats
from juggler.router.gateway.metrics import MetricsView, exposition


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


def hist(bounds: tuple[float, ...], *values: float) -> Histogram:
    h = Histogram(bounds)
    for v in values:
        h.observe(v)
    return h


def test_seed_004_families_types_and_totals_that_never_go_down() -> None:
    """Issue 12: "Classic Prometheus text 0.0.4 [...] every family has `# TYPE` before its
    samples, no `info`/`unknown` types"; `vllm:lora_requests_info` with an integer
    `max_lora`; prompt/generation token counters and the two latency histograms, which
    include backends that are gone (`retired`)."""
    live = Totals(10, 5, hist(TTFT_BUCKETS, 0.05, 0.3), hist(TPOT_BUCKETS, 0.01, 0.02, 0.5))
    gone = Totals(7, 3, hist(TTFT_BUCKETS, 2.0), hist(TPOT_BUCKETS))
    view = MetricsView(
        backends=(
            BackendFigures(
                "a", "llm", "cpu", kv_total=512, tokens_running=40, tokens_waiting=9, totals=live
            ),
        ),
        retired=gone,
        lora_changed_at=1234.5,
    )
    text = exposition(view).decode()
    assert text.endswith("\n")
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE"))
    assert set(types.values()) <= {"gauge", "counter", "histogram"}
    assert types["vllm:time_to_first_token_seconds"] == "histogram"
    assert types["vllm:prompt_tokens_total"] == "counter"
    got = families(text)
    assert got["vllm:num_tokens_running"] == [({}, 40.0)]
    assert got["vllm:num_tokens_waiting"] == [({}, 9.0)]
    assert got["vllm:max_token_capacity"] == [({}, 512.0)]
    assert got["vllm:gpu_cache_usage_perc"] == got["vllm:kv_cache_usage_perc"]
    assert [v for labels, v in got["vllm:prompt_tokens"] if not labels] == [17.0]
    assert [v for _, v in got["vllm:generation_tokens"]] == [8.0]
    ttft = {s[0].get("le"): s[1] for s in got["vllm:time_to_first_token_seconds"]}
    assert ttft["0.06"] == 1 and ttft["0.5"] == 2 and ttft["+Inf"] == 3
    tpot = got["vllm:time_per_output_token_seconds"]
    assert ({}, 3.0) in [(labels, v) for labels, v in tpot if not labels.get("le")]
    ((labels, value),) = got["vllm:lora_requests_info"]
    assert (
        labels
        == {
            "running_lora_adapters": "",
            "waiting_lora_adapters": "",
            "max_lora": "0",
        }
        and value == 1234.5
    )
    int(labels["max_lora"])


def test_backend_stats_parse_into_figures_and_junk_reads_as_zero() -> None:
    base = BackendFigures("a", "llm", "cpu")
    body = {
        "requests_running": 2,
        "requests_waiting": 1,
        "kv_cells_used": 10,
        "kv_cells_total": 100,
        "tokens_running": 30,
        "prompt_tokens_prefilled_total": 4,
        "prompt_tokens_reused_total": 6,
        "generation_tokens_total": 9,
        "histograms": {"time_to_first_token_seconds": hist(TTFT_BUCKETS, 0.1).to_json()},
    }
    got = parse_stats(base, body)
    assert (got.running, got.waiting, got.kv_usage, got.tokens_running) == (2, 1, 0.1, 30)
    assert got.totals.prompt_tokens == 10 and got.totals.generation_tokens == 9
    assert got.totals.ttft.count == 1 and got.totals.tpot.count == 0
    junk = parse_stats(base, {"requests_running": "many", "histograms": {"x": 1}})
    assert junk.running == 0 and junk.totals.ttft.count == 0
