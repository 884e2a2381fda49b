"""Latency histograms under vLLM's buckets, shared by the engine (which observes) and the
router (which adds up its backends and serves `vllm:*_seconds` at /metrics).

Seed 004 names `vllm:time_to_first_token_seconds` and `vllm:time_per_output_token_seconds`
histograms. A `Histogram` keeps per-bucket counts (not cumulative), the sum and the
count; it travels as JSON in the backend's /stats and is rendered cumulatively by the
router. Pure data: no clock, no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

#: vLLM's time-to-first-token buckets (seconds).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
#: vLLM's time-per-output-token buckets, with finer ones below 10 ms for small models.
TPOT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
    0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    #: Observations per bucket: counts[i] for values <= bounds[i] (and above bounds[i-1]);
    #: the last entry counts values above every bound (+Inf).
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def add(self, other: Histogram) -> None:
        """Add `other`'s observations (same buckets)."""
        if other.bounds != self.bounds:
            raise ValueError("histograms with different buckets")
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.count += other.count

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as Prometheus exposes them."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.total, "count": self.count}

    @classmethod
    def from_json(cls, bounds: tuple[float, ...], data: Any) -> Histogram:
        """A histogram from `to_json` output; an empty one if `data` does not fit."""
        try:
            counts = [int(n) for n in data["counts"]]
            if len(counts) != len(bounds) + 1:
                raise ValueError("bucket count")
            return cls(bounds, counts, float(data["sum"]), int(data["count"]))
        except (KeyError, TypeError, ValueError):
            return cls(bounds)
