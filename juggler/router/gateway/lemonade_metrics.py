"""Lemonade's telemetry: the cumulative counters of `GET /api/v1/stats` and the
`lemonade_*` metric families of `GET /metrics`, beside the vLLM ones (router/gateway/metrics.py).

Lemonade's docs: "`*_total` - Cumulative counters since server start"; `cache_tokens` is
"Prompt tokens served from the backend's prefix cache". Its metric families (names,
types, help and labels as its `/metrics` implementation describes them) are emitted
here from what the router already holds (the figures poller's view), never by a fan-out:
per model observed since start, `lemonade_model_info`/`_loaded` and its latest request's
figures, with the labels `model_name`, `checkpoint`, `type`, `device`, `recipe`; server
totals; the loaded-model limits. "Unsupported, unavailable, null, NaN, and infinity
values are omitted rather than emitted as samples": a family with nothing to report is
described with no sample. Juggler has no `collection.router`, so its routing counters
stay 0; its backends are not llama-server, so there is no `lemonade_llamacpp_*`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from juggler import __version__
from juggler.router.core.figures import BackendFigures, Totals, lemonade_counters

LABELS = ["model_name", "checkpoint", "type", "device", "recipe"]
#: Lemonade's per-model gauges of the latest request: (family, help, figure key).
LATEST = (
    (
        "lemonade_model_input_tokens",
        "Latest input token count reported by a model.",
        "input_tokens",
    ),
    (
        "lemonade_model_output_tokens",
        "Latest output token count reported by a model.",
        "output_tokens",
    ),
    (
        "lemonade_model_prompt_tokens",
        "Latest prompt token count reported by a model.",
        "prompt_tokens",
    ),
    (
        "lemonade_model_cache_tokens",
        "Latest prompt tokens served from the backend prefix cache for a model.",
        "cache_tokens",
    ),
    (
        "lemonade_model_time_to_first_token_seconds",
        "Latest time to first token reported by a model.",
        "time_to_first_token",
    ),
    (
        "lemonade_model_tokens_per_second",
        "Latest generation throughput reported by a model.",
        "tokens_per_second",
    ),
)


@dataclass(frozen=True)
class LemonadeView:
    #: The ready backends' figures now.
    backends: tuple[BackendFigures, ...] = ()
    #: Every model observed since start: its latest figures.
    seen: Mapping[str, BackendFigures] = field(default_factory=dict)
    #: Per model, the totals of its backends that are gone.
    retired_by_model: Mapping[str, Totals] = field(default_factory=dict)
    #: Server-wide totals (gone backends included).
    totals: Totals = field(default_factory=Totals)
    #: Loaded-model limit per type (-1: unlimited).
    max_models: Mapping[str, int] = field(default_factory=dict)


def _labels(f: BackendFigures) -> list[str]:
    return [f.model, f.checkpoint, f.model_type, f.device, f.recipe]


def memory_used_gb(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """System memory in use (total less available), in GiB to one decimal; None where
    /proc/meminfo cannot tell."""
    fields: dict[str, int] = {}
    try:
        for line in meminfo.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                fields[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) < 2:
        return None
    return round((fields["MemTotal"] - fields["MemAvailable"]) / (1024 * 1024), 1)


def families(view: LemonadeView) -> Iterator[Metric]:
    yield GaugeMetricFamily("lemonade_server_up", "Whether the Lemonade server is running.", 1)
    info = GaugeMetricFamily(
        "lemonade_server_info", "Lemonade server build information.", labels=["version"]
    )
    info.add_metric([__version__], 1)
    yield info
    yield GaugeMetricFamily(
        "lemonade_loaded_models",
        "Number of models currently loaded in Lemonade.",
        len(view.backends),
    )
    yield from _per_model(view)
    limits = GaugeMetricFamily(
        "lemonade_max_loaded_models",
        "Configured loaded model limit per model type.",
        labels=["type"],
    )
    for kind, limit in view.max_models.items():
        limits.add_metric([kind], limit)
    yield limits
    t = lemonade_counters(view.totals)
    for name, doc, key in (
        (
            "lemonade_requests_total",
            "Cumulative inference requests observed by Lemonade.",
            "request_count_total",
        ),
        (
            "lemonade_input_tokens_total",
            "Cumulative input tokens observed by Lemonade.",
            "input_tokens_total",
        ),
        (
            "lemonade_output_tokens_total",
            "Cumulative output tokens observed by Lemonade.",
            "output_tokens_total",
        ),
        (
            "lemonade_prompt_tokens_total",
            "Cumulative prompt tokens observed by Lemonade.",
            "prompt_tokens_total",
        ),
        (
            "lemonade_cache_tokens_total",
            "Cumulative prompt tokens served from backend prefix caches.",
            "cache_tokens_total",
        ),
        (
            "lemonade_routing_decisions_total",
            "Cumulative collection.router routing decisions.",
            "routing_decisions_total",
        ),
        (
            "lemonade_routing_switches_total",
            "Cumulative routing decisions that changed a conversation's routed model.",
            "routing_switches_total",
        ),
    ):
        yield CounterMetricFamily(name, doc, value=t[key])
    memory = GaugeMetricFamily("lemonade_memory_used_gb", "System memory usage in GiB.")
    if (used := memory_used_gb()) is not None:
        memory.add_metric([], used)
    yield memory


def _per_model(view: LemonadeView) -> Iterator[Metric]:
    live: dict[str, Totals] = {}
    for b in view.backends:
        live[b.model] = live.get(b.model, Totals()).plus(b.totals)
    loaded = {b.model for b in view.backends}
    models = sorted(view.seen.values(), key=lambda f: f.model)
    info = GaugeMetricFamily(
        "lemonade_model_info",
        "Metadata for each Lemonade model observed by this process.",
        labels=LABELS,
    )
    is_loaded = GaugeMetricFamily(
        "lemonade_model_loaded",
        "Whether this model is currently loaded in Lemonade.",
        labels=LABELS,
    )
    for f in models:
        info.add_metric(_labels(f), 1)
        is_loaded.add_metric(_labels(f), 1 if f.model in loaded else 0)
    yield from (info, is_loaded)
    for name, doc, key in LATEST:
        gauge = GaugeMetricFamily(name, doc, labels=LABELS)
        for f in models:
            if key in f.last_request:
                gauge.add_metric(_labels(f), f.last_request[key])
        yield gauge
    totals = {
        f.model: view.retired_by_model.get(f.model, Totals()).plus(live.get(f.model, Totals()))
        for f in models
    }
    for name, doc, attr in (
        (
            "lemonade_model_requests_total",
            "Cumulative inference requests observed for a model.",
            "requests",
        ),
        (
            "lemonade_model_input_tokens_total",
            "Cumulative input tokens observed for a model.",
            "prompt_tokens",
        ),
        (
            "lemonade_model_output_tokens_total",
            "Cumulative output tokens observed for a model.",
            "generation_tokens",
        ),
        (
            "lemonade_model_prompt_tokens_total",
            "Cumulative prompt tokens observed for a model.",
            "prompt_tokens",
        ),
        (
            "lemonade_model_cache_tokens_total",
            "Cumulative prompt tokens served from the backend prefix cache for a model.",
            "cache_tokens",
        ),
    ):
        counter = CounterMetricFamily(name, doc, labels=LABELS)
        for f in models:
            counter.add_metric(_labels(f), getattr(totals[f.model], attr))
        yield counter
