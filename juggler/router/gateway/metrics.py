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
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from juggler.router.core.figures import BackendFigures, Totals
from juggler.router.gateway.lemonade_metrics import LemonadeView, families

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


@dataclass(frozen=True)
class MetricsView:
    backends: tuple[BackendFigures, ...] = ()
    #: Requests inside the router waiting for their model to load.
    router_waiting: int = 0
    #: Manager counters since start (`queued` is a gauge: loads queued or running).
    counters: dict[str, int] = field(default_factory=dict)
    #: Counters and histograms of backends that are gone (they never go down).
    retired: Totals = field(default_factory=Totals)
    #: `max_lora` when no backend reports one (the engine's --max-active-adapters).
    default_max_lora: int = 0
    #: When the LoRA state last changed (the value of vllm:lora_requests_info).
    lora_changed_at: float = 0.0
    #: Lemonade's `lemonade_*` families, beside the vLLM ones (None: left out).
    lemonade: LemonadeView | None = None
    #: Per model: bytes it holds on the GPU and its layers offloaded (issue 48).
    vram: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def totals(self) -> Totals:
        out = self.retired
        for b in self.backends:
            out = out.plus(b.totals)
        return out


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
        yield from self._seed_004()
        yield from self._per_model()
        for key, value in sorted(view.counters.items()):
            if key == "queued":
                yield _gauge("juggler:loads_queued", "Loads queued or running.", value)
            else:
                yield CounterMetricFamily(f"juggler:{key}", f"Manager counter {key}.", value=value)
        if view.lemonade is not None:
            yield from families(view.lemonade)

    def _seed_004(self) -> Iterator[Metric]:
        view = self.view
        backends = view.backends
        yield _gauge(
            "vllm:num_tokens_running",
            "Tokens held by the sequences generating now.",
            sum(b.tokens_running for b in backends),
        )
        yield _gauge(
            "vllm:num_tokens_waiting",
            "Prompt tokens of the requests waiting for a sequence.",
            sum(b.tokens_waiting for b in backends),
        )
        yield _gauge(
            "vllm:max_token_capacity",
            "KV-cache cells (tokens) across all backends.",
            sum(b.kv_total for b in backends),
        )
        running = sorted({a for b in backends for a in b.running_adapters})
        waiting = sorted({a for b in backends for a in b.waiting_adapters})
        max_lora = max((b.max_lora for b in backends), default=0) or view.default_max_lora
        lora = GaugeMetricFamily(
            "vllm:lora_requests_info",
            "LoRA adapters applied now and wanted by waiting requests; value: last change.",
            labels=["running_lora_adapters", "waiting_lora_adapters", "max_lora"],
        )
        lora.add_metric([",".join(running), ",".join(waiting), str(max_lora)], view.lora_changed_at)
        yield lora
        totals = view.totals
        yield CounterMetricFamily(
            "vllm:prompt_tokens", "Prompt tokens processed.", value=totals.prompt_tokens
        )
        yield CounterMetricFamily(
            "vllm:generation_tokens", "Tokens generated.", value=totals.generation_tokens
        )
        for name, doc, hist in (
            ("vllm:time_to_first_token_seconds", "Time to first token.", totals.ttft),
            ("vllm:time_per_output_token_seconds", "Time per output token.", totals.tpot),
        ):
            yield HistogramMetricFamily(name, doc, buckets=hist.cumulative(), sum_value=hist.total)

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
        # Per backend: they start from 0 again when a model is loaded again.
        tokens = CounterMetricFamily(
            "juggler:model_generation_tokens",
            "Tokens generated, per model (since it was loaded).",
            labels=["model"],
        )
        prompts = CounterMetricFamily(
            "juggler:model_prompt_tokens",
            "Prompt tokens processed, per model (since it was loaded).",
            labels=["model"],
        )
        ttft = HistogramMetricFamily(
            "juggler:model_time_to_first_token_seconds",
            "Time to first token, per model (since it was loaded).",
            labels=["model"],
        )
        for b in backends:
            tokens.add_metric([b.model], b.totals.generation_tokens)
            prompts.add_metric([b.model], b.totals.prompt_tokens)
            ttft.add_metric([b.model], b.totals.ttft.cumulative(), b.totals.ttft.total)
        yield from (tokens, prompts, ttft)
        loaded = GaugeMetricFamily(
            "juggler:model_loaded",
            "1 for each loaded model.",
            labels=["model", "type", "device", "pinned"],
        )
        for b in backends:
            loaded.add_metric([b.model, b.model_type, b.device, str(b.pinned).lower()], 1)
        yield loaded
        vram = GaugeMetricFamily(
            "juggler:model_vram_bytes",
            "GPU memory a model's backend holds (NVML's per-process figure where NVML "
            "answers, else llama.cpp's buffers); 0 on the CPU.",
            labels=["model"],
        )
        layers = GaugeMetricFamily(
            "juggler:model_gpu_layers",
            "Layers llama.cpp offloaded to the GPU, per model.",
            labels=["model"],
        )
        for b in backends:
            held, offloaded = self.view.vram.get(b.model, (0, 0))
            vram.add_metric([b.model], held)
            layers.add_metric([b.model], offloaded)
        yield from (vram, layers)
        yield _gauge("juggler:models_loaded", "Loaded models.", len(backends))


def exposition(view: MetricsView) -> bytes:
    """Prometheus text format 0.0.4 for `view`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ViewCollector(view))
    return generate_latest(registry)
