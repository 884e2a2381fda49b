"""The backend's /stats body and /metrics exposition, read from published snapshots.

Runs on the event loop: worker snapshots are immutable objects each worker replaces
after every tick, and the master's counters are only written by the master task on the
same loop, so reading them here needs no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from juggler.engine.media_prompt import media_counters

if TYPE_CHECKING:
    from juggler.engine.runtime import Engine


def engine_counters(engine: Engine) -> dict[str, Any]:
    snaps = engine.worker_snapshots()
    used = sum(s.kv_used for s in snaps)
    total = sum(s.kv_total for s in snaps)
    return {
        "requests_running": sum(s.num_running for s in snaps),
        "requests_waiting": sum(s.num_waiting for s in snaps),
        "sessions": sum(s.num_sessions for s in snaps),
        "cached_sequences": sum(s.num_cached for s in snaps),
        "kv_cells_used": used,
        "kv_cells_total": total,
        "kv_cache_usage_perc": used / total if total else 0.0,
        "decode_calls_total": sum(s.num_decodes for s in snaps),
        "decode_seconds_total": sum(s.decode_s for s in snaps),
        "max_batch_sequences": max((s.max_batch_seqs for s in snaps), default=0),
        "kv_compactions_total": sum(s.num_compactions for s in snaps),
        "prefix_shares_total": sum(s.num_shares for s in snaps),
        "parked_sequences": sum(s.num_parked for s in snaps),
        "parked_cells": sum(s.parked_cells for s in snaps),
        "parked_sessions": sum(s.num_parked_sessions for s in snaps),
        "session_parks_total": sum(s.session_parks for s in snaps),
        "session_restores_total": sum(s.session_restores for s in snaps),
        "tokens_running": sum(s.tokens_running for s in snaps),
        "tokens_waiting": sum(s.tokens_waiting for s in snaps),
        "max_token_capacity": total,
        "spec_draft_tokens_total": sum(s.spec_drafted for s in snaps),
        "spec_accepted_tokens_total": sum(s.spec_accepted for s in snaps),
        "lora": {
            "loaded": sorted({a for s in snaps for a in s.adapters_loaded}),
            "running": sorted({a for s in snaps for a in s.adapters_running}),
            "waiting": sorted({a for s in snaps for a in s.adapters_waiting}),
            "max_active": engine.config.flags.max_active_adapters if engine.is_llm else 0,
        },
    }


def stats_body(engine: Engine) -> dict[str, Any]:
    """Lemonade's stats fields for the latest finished request plus engine counters."""
    master = engine.master
    out: dict[str, Any] = {}
    if master is not None and master.last_stats is not None:
        out.update(master.last_stats.as_dict())
    else:
        out.update(
            {
                "time_to_first_token": None,
                "tokens_per_second": None,
                "input_tokens": None,
                "output_tokens": None,
                "prompt_tokens": None,
                "prompt_tokens_prefilled": None,
                "prompt_tokens_reused": None,
                "decode_token_count": None,
                "decode_token_times": [],
            }
        )
    # Lemonade's `cache_tokens`: "Prompt tokens served from the backend's prefix cache on
    # the last request (llama.cpp `timings.cache_n` ...)".
    out["cache_tokens"] = out["prompt_tokens_reused"]
    out.update(engine_counters(engine))
    out.update(media_counters(engine))
    if master is not None:
        t = master.totals
        out.update(
            {
                "prompt_tokens_prefilled_total": t.prompt_tokens_prefilled,
                "prompt_tokens_reused_total": t.prompt_tokens_reused,
                "generation_tokens_total": t.generation_tokens,
                "requests_finished_total": t.requests_finished,
                "histograms": {
                    "time_to_first_token_seconds": t.ttft.to_json(),
                    "time_per_output_token_seconds": t.tpot.to_json(),
                },
            }
        )
    return out


class _EngineCollector:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        c = engine_counters(self.engine)
        yield GaugeMetricFamily(
            "vllm:num_requests_waiting",
            "Requests waiting for a sequence slot.",
            value=c["requests_waiting"],
        )
        yield GaugeMetricFamily(
            "vllm:num_requests_running", "Generations in progress.", value=c["requests_running"]
        )
        yield GaugeMetricFamily(
            "vllm:kv_cache_usage_perc",
            "Fraction of KV cache cells in use (0..1).",
            value=c["kv_cache_usage_perc"],
        )
        master = self.engine.master
        t = master.totals if master is not None else None
        yield CounterMetricFamily(
            "juggler:prompt_tokens_prefilled",
            "Prompt tokens decoded (excluding reused KV).",
            value=t.prompt_tokens_prefilled if t else 0,
        )
        yield CounterMetricFamily(
            "juggler:prompt_tokens_reused",
            "Prompt tokens found already in the KV cache.",
            value=t.prompt_tokens_reused if t else 0,
        )
        yield CounterMetricFamily(
            "juggler:generation_tokens", "Tokens generated.", value=t.generation_tokens if t else 0
        )


def render_metrics(engine: Engine) -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(engine))  # type: ignore[arg-type]
    return generate_latest(registry), CONTENT_TYPE_LATEST
