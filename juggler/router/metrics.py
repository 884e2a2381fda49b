"""The router's one Prometheus registry, for the Gateway API Inference Extension (seed 004).

The endpoint picker scrapes one series per metric family under vLLM's names, so the
server-wide figures come first and unlabelled: requests waiting (in the router for a
load, plus in every backend's queue), requests running, and KV-cache use as a 0..1
fraction of all backends' cells. Per-model detail is exposed beside them under
`juggler:` names with a `model` label.

Everything is built by `prometheus_client` from a `MetricsView` (what the router knows at
the moment of the scrape); `exposition(view)` renders classic text format 0.0.4.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


@dataclass(frozen=True)
class BackendFigures:
    """What one ready backend reported (zeros when it did not answer)."""

    model: str
    model_type: str
    device: str
    running: int = 0
    waiting: int = 0
    kv_used: int = 0
    kv_total: int = 0
    in_flight: int = 0
    pinned: bool = False

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_total if self.kv_total else 0.0


@dataclass(frozen=True)
class MetricsView:
    backends: tuple[BackendFigures, ...] = ()
    #: Requests inside the router waiting for their model to load.
    router_waiting: int = 0
    #: Manager counters since start (`queued` is a gauge: loads queued or running).
    counters: dict[str, int] = field(default_factory=dict)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class ViewCollector(Collector):
    """Turns one `MetricsView` into metric families, server-wide series first."""

    def __init__(self, view: MetricsView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        used = sum(b.kv_used for b in view.backends)
        total = sum(b.kv_total for b in view.backends)
        usage = used / total if total else 0.0
        waiting = view.router_waiting + sum(b.waiting for b in view.backends)
        yield _gauge(
            "vllm:num_requests_waiting",
            "Requests waiting: for a load in the router or for a sequence slot in a backend.",
            waiting,
        )
        yield _gauge(
            "vllm:num_requests_running",
            "Requests being decoded across all backends.",
            sum(b.running for b in view.backends),
        )
        yield _gauge(
            "vllm:kv_cache_usage_perc", "KV-cache cells in use across all backends, 0..1.", usage
        )
        yield _gauge(
            "vllm:gpu_cache_usage_perc", "Same as vllm:kv_cache_usage_perc (older name).", usage
        )
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "KV-cache shape: one token per block; num_gpu_blocks is the total token capacity.",
            labels=["block_size", "num_gpu_blocks"],
        )
        info.add_metric(["1", str(total)], 1)
        yield info
        yield from self._per_model()
        for key, value in sorted(view.counters.items()):
            if key == "queued":
                yield _gauge("juggler:loads_queued", "Loads queued or running.", value)
            else:
                yield CounterMetricFamily(f"juggler:{key}", f"Manager counter {key}.", value=value)

    def _per_model(self) -> Iterator[Metric]:
        backends = self.view.backends
        families = (
            ("juggler:model_requests_running", "Requests being decoded, per model.", "running"),
            (
                "juggler:model_requests_waiting",
                "Requests queued in the backend, per model.",
                "waiting",
            ),
            ("juggler:model_kv_cache_usage_perc", "KV-cache use per model, 0..1.", "kv_usage"),
        )
        for name, doc, attr in families:
            fam = GaugeMetricFamily(name, doc, labels=["model"])
            for b in backends:
                fam.add_metric([b.model], float(getattr(b, attr)))
            yield fam
        loaded = GaugeMetricFamily(
            "juggler:model_loaded",
            "1 for each loaded model.",
            labels=["model", "type", "device", "pinned"],
        )
        for b in backends:
            loaded.add_metric([b.model, b.model_type, b.device, str(b.pinned).lower()], 1)
        yield loaded
        yield _gauge("juggler:models_loaded", "Loaded models.", len(backends))


def exposition(view: MetricsView) -> bytes:
    """Prometheus text format 0.0.4 for `view`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(view))
    return generate_latest(registry)
