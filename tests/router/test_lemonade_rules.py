"""Issue 24, item 6: the pure rules behind Lemonade's contract (reference/lemonade/)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from juggler.router.core import load_options
from juggler.router.core.figures import BackendFigures, Totals, lemonade_counters, parse_stats
from juggler.router.gateway.lemonade_metrics import LemonadeView
from juggler.router.gateway.metrics import MetricsView, exposition


def test_split_takes_load_options_out_and_keeps_only_ctx_size_for_the_auto_load() -> None:
    """Lemonade's server: "Keep this an explicit allowlist so request-scoped fields do not
    leak into recipe options" (only `ctx_size`); the others are `/load`'s, not the
    request's, so they do not reach the backend either."""
    raw = {
        "model": "m",
        "messages": [],
        "temperature": 0.5,
        "pinned": True,
        "ctx_size": 2048,
        "llamacpp_args": "--foo",
        "auto_evict": True,
        "save_options": True,
    }
    body, auto_load = load_options.split(raw)
    assert body == {"model": "m", "messages": [], "temperature": 0.5}
    assert auto_load == {"ctx_size": 2048}
    assert load_options.split({"model": "m", "ctx_size": None}) == ({"model": "m"}, {})


def sample_labels(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Lemonade's test reading of /metrics: samples by name (every family must parse)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation is not None and family.type
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def test_lemonade_families_beside_the_vllm_ones() -> None:
    """lemonade.md, /metrics: the `lemonade_*` families of its implementation ("Search
    for `handle_metrics` and `metrics.describe(...)`"): server up and info, loaded
    models, per model `lemonade_model_info`/`_loaded`, its latest request and its totals
    (a model's gone backends included), server totals, limits per type; "Unsupported,
    unavailable, null ... values are omitted rather than emitted as samples"."""
    a = BackendFigures(
        "a",
        "llm",
        "cpu",
        checkpoint="org/a:Q4",
        recipe="llamacpp",
        totals=Totals(10, 5, requests=2, cache_tokens=4),
        last_request={"input_tokens": 6, "output_tokens": 3, "cache_tokens": 4},
    )
    gone_b = BackendFigures("b", "embedding", "cpu", recipe="llamacpp")
    view = MetricsView(
        backends=(a,),
        lemonade=LemonadeView(
            backends=(a,),
            seen={"a": a, "b": gone_b},
            retired_by_model={"a": Totals(1, 1, requests=1, cache_tokens=1)},
            totals=Totals(20, 8, requests=5, cache_tokens=6),
            max_models={"llm": 2, "embedding": -1},
        ),
    )
    text = exposition(view).decode()
    for help_line in (
        "# HELP lemonade_model_cache_tokens ",
        "# HELP lemonade_model_cache_tokens_total ",
    ):
        assert help_line in text
    got = sample_labels(text)
    assert "vllm:num_requests_running" in got
    assert got["lemonade_server_up"] == [({}, 1.0)]
    assert got["lemonade_loaded_models"] == [({}, 1.0)]
    labels_a = {
        "model_name": "a",
        "checkpoint": "org/a:Q4",
        "type": "llm",
        "device": "cpu",
        "recipe": "llamacpp",
    }
    assert (labels_a, 1.0) in got["lemonade_model_info"]
    loaded = {lab["model_name"]: v for lab, v in got["lemonade_model_loaded"]}
    assert loaded == {"a": 1.0, "b": 0.0}
    assert got["lemonade_model_cache_tokens"] == [(labels_a, 4.0)]
    assert "lemonade_model_tokens_per_second" not in got, "not reported: no sample"
    requests = {lab["model_name"]: v for lab, v in got["lemonade_model_requests_total"]}
    assert requests == {"a": 3.0, "b": 0.0}
    cache = {lab["model_name"]: v for lab, v in got["lemonade_model_cache_tokens_total"]}
    assert cache == {"a": 5.0, "b": 0.0}
    assert got["lemonade_requests_total"] == [({}, 5.0)]
    assert got["lemonade_cache_tokens_total"] == [({}, 6.0)]
    assert got["lemonade_prompt_tokens_total"] == [({}, 20.0)]
    assert got["lemonade_routing_switches_total"] == [({}, 0.0)]
    limits = {lab["type"]: v for lab, v in got["lemonade_max_loaded_models"]}
    assert limits == {"llm": 2.0, "embedding": -1.0}


def test_stats_counters_are_lemonade_names_of_the_totals() -> None:
    """lemonade.md, /stats: "`*_total` - Cumulative counters since server start"."""
    got = lemonade_counters(Totals(30, 12, requests=4, cache_tokens=9))
    assert got == {
        "request_count_total": 4,
        "input_tokens_total": 30,
        "output_tokens_total": 12,
        "prompt_tokens_total": 30,
        "cache_tokens_total": 9,
        "routing_decisions_total": 0,
        "routing_switches_total": 0,
    }


def test_parsed_stats_carry_the_last_request_and_lemonade_totals() -> None:
    base = BackendFigures("a", "llm", "cpu")
    data = {
        "input_tokens": 12,
        "cache_tokens": 8,
        "tokens_per_second": 40.5,
        "time_to_first_token": None,
        "requests_finished_total": 3,
        "prompt_tokens_prefilled_total": 20,
        "prompt_tokens_reused_total": 8,
    }
    got = parse_stats(base, data)
    assert got.last_request == {"input_tokens": 12, "cache_tokens": 8, "tokens_per_second": 40.5}
    assert (got.totals.requests, got.totals.cache_tokens, got.totals.prompt_tokens) == (3, 8, 28)
