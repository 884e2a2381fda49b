"""The router's Prometheus exposition for the Gateway API Inference Extension (seed 004).

The endpoint picker scrapes one series per metric family under vLLM's names, so the
server-wide figures are unlabelled: requests waiting (in the router for a load, plus in
every backend's queue), requests running, and KV-cache use as a 0..1 fraction of all
backends' cells. Per-model detail is exposed beside them under `juggler:` names with a
`model` label. Building the text is pure: `render(view)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BackendFigures:
    """What one ready backend reported on /stats (zeros when it did not answer)."""

    model: str
    model_type: str
    device: str
    running: int = 0
    waiting: int = 0
    kv_used: int = 0
    kv_total: int = 0
    in_flight: int = 0
    pinned: bool = False


@dataclass(frozen=True)
class MetricsView:
    backends: list[BackendFigures] = field(default_factory=list)
    #: Requests inside the router waiting for their model to load.
    router_waiting: int = 0
    counters: dict[str, int] = field(default_factory=dict)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def render(view: MetricsView) -> str:
    """Prometheus text format 0.0.4."""
    used = sum(b.kv_used for b in view.backends)
    total = sum(b.kv_total for b in view.backends)
    usage = used / total if total else 0.0
    waiting = view.router_waiting + sum(b.waiting for b in view.backends)
    running = sum(b.running for b in view.backends)
    lines: list[str] = []
    lines += _family(
        "vllm:num_requests_waiting",
        "gauge",
        "Requests waiting: for a load in the router or for a sequence slot in a backend.",
        [("", waiting)],
    )
    lines += _family(
        "vllm:num_requests_running",
        "gauge",
        "Requests being decoded across all backends.",
        [("", running)],
    )
    lines += _family(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache cells in use across all backends, 0..1.",
        [("", usage)],
    )
    lines += _family(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "Same as vllm:kv_cache_usage_perc (older vLLM name).",
        [("", usage)],
    )
    lines += _family(
        "vllm:cache_config_info",
        "gauge",
        "KV-cache shape: one token per block; num_gpu_blocks is the total token capacity.",
        [(f'{{block_size="1",num_gpu_blocks="{total}"}}', 1)],
    )
    per_model = [(f'{{model="{_esc(b.model)}"}}', b) for b in view.backends]
    lines += _family(
        "juggler:model_requests_running",
        "gauge",
        "Requests being decoded, per model.",
        [(lb, b.running) for lb, b in per_model],
    )
    lines += _family(
        "juggler:model_requests_waiting",
        "gauge",
        "Requests queued in the backend, per model.",
        [(lb, b.waiting) for lb, b in per_model],
    )
    lines += _family(
        "juggler:model_kv_cache_usage_perc",
        "gauge",
        "KV-cache use per model, 0..1.",
        [(lb, b.kv_used / b.kv_total if b.kv_total else 0.0) for lb, b in per_model],
    )
    lines += _family(
        "juggler:model_loaded",
        "gauge",
        "1 for each loaded model.",
        [
            (
                f'{{model="{_esc(b.model)}",type="{b.model_type}",device="{b.device}",pinned="{str(b.pinned).lower()}"}}',
                1,
            )
            for b in view.backends
        ],
    )
    lines += _family("juggler:models_loaded", "gauge", "Loaded models.", [("", len(view.backends))])
    for key, value in sorted(view.counters.items()):
        if key == "queued":
            lines += _family(
                "juggler:loads_queued", "gauge", "Loads queued or running.", [("", value)]
            )
        else:
            lines += _family(
                f"juggler:{key}_total", "counter", f"Manager counter {key}.", [("", value)]
            )
    return "\n".join(lines) + "\n"
