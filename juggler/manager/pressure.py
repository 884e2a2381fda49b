"""Seed 002's dynamic memory management as pure decisions. No I/O, no clock, no logging.

Seed 002: "Soft idle (downsize): after `downsize_idle_timeout` seconds idle, the KV
cache/context is cleared to free dynamic memory while base weights stay resident. [...]
Hard idle / pressure (evict): after `evict_idle_timeout` seconds idle, or under VRAM
pressure, the model is fully unloaded [...] Under pressure, the engine evicts by
`eviction_score = idle_time_ms / (load_duration_ms * evict_weight_factor)`. Higher score
= more disposable." And: "Pinned models are excluded from the eviction candidate search."

Candidates are models opted in (`auto_evict`, per model or global), not pinned and with
no request in flight. The owner carries the actions out; `relief_step` is one step,
and the monitor measures again before the next (issue 11: "repeat while pressure
remains, re-measuring after each step"). Downsizing is preferred while it alone can
bring usage below the threshold.

Issue 48: "seed 002's memory management watches VRAM the way it watches RAM (downsize
frees VRAM, and says how much)". A sample of the GPU's memory (`memory="gpu"`) is
relieved by the models on the GPU only (`vram_bytes` above 0), weighing what a downsize
frees there (`downsizable_vram_bytes`); a sample of host memory by every model, weighing
what a downsize frees of host memory (`downsizable_bytes`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from juggler.manager.memory import MemorySample


class Step(enum.Enum):
    DOWNSIZE = "downsize"
    EVICT = "evict"


@dataclass(frozen=True)
class Action:
    step: Step
    model_name: str


@dataclass(frozen=True)
class MemoryView:
    """What the memory policy needs to know about one resident server."""

    model_name: str
    last_use: float
    load_duration_s: float = 0.0
    evict_weight_factor: float = 1.0
    pinned: bool = False
    in_flight: int = 0
    #: auto_evict for this model (its own setting, else the global one).
    opted_in: bool = False
    #: Its contexts are freed (or being freed): nothing more to downsize.
    is_downsized: bool = False
    #: What a downsize frees (KV cache and compute buffers); 0: it cannot downsize.
    downsizable_bytes: int = 0
    #: What it holds on the GPU, and what a downsize frees there (issue 48).
    vram_bytes: int = 0
    downsizable_vram_bytes: int = 0
    downsize_idle_timeout_s: float = 60.0
    evict_idle_timeout_s: float = 300.0

    @property
    def can_downsize(self) -> bool:
        return self.downsizable_bytes > 0 and not self.is_downsized

    def frees(self, memory: str) -> int:
        """What a downsize frees of `memory` ("gpu" or "host"); 0 when it cannot."""
        if not self.can_downsize:
            return 0
        return self.downsizable_vram_bytes if memory == "gpu" else self.downsizable_bytes


def eviction_score(view: MemoryView, now: float) -> float:
    """Seed 002: idle_time_ms / (load_duration_ms * evict_weight_factor); higher = more
    disposable (fast loads go first, heavy weights protect)."""
    idle_ms = max(0.0, now - view.last_use) * 1000
    load_ms = max(view.load_duration_s * 1000, 1.0)
    return idle_ms / (load_ms * max(view.evict_weight_factor, 1e-12))


def candidates(views: Sequence[MemoryView]) -> list[MemoryView]:
    return [v for v in views if v.opted_in and not v.pinned and v.in_flight == 0]


def idle_actions(
    views: Sequence[MemoryView], now: float, min_downsize_idle_s: float = 0.0
) -> tuple[list[Action], float | None]:
    """The idle timeouts due at `now` (evict wins over downsize), and when the next one
    falls due (None: no timer needed). `now` is on the `last_use` clock. A downsize
    falls due no sooner than `min_downsize_idle_s` after the last use (the background
    pass: Lemonade's `downsize_idle_timeout=0` means "at the next evaluation", so a model
    is `ready` right after its load)."""
    actions: list[Action] = []
    next_at: float | None = None

    def later(at: float) -> None:
        nonlocal next_at
        next_at = at if next_at is None else min(next_at, at)

    for v in candidates(views):
        evict_at = v.last_use + v.evict_idle_timeout_s
        downsize_at = v.last_use + max(v.downsize_idle_timeout_s, min_downsize_idle_s)
        if evict_at <= now:
            actions.append(Action(Step.EVICT, v.model_name))
            continue
        later(evict_at)
        if v.can_downsize:
            if downsize_at <= now:
                actions.append(Action(Step.DOWNSIZE, v.model_name))
            else:
                later(downsize_at)
    return actions, next_at


def is_under_pressure(sample: MemorySample, threshold: float) -> bool:
    """Lemonade: "A `pct` at or above `auto_evict_threshold_pct` runs pressure eviction"."""
    return sample.total_bytes > 0 and sample.fraction >= threshold


def relief_step(
    views: Sequence[MemoryView],
    sample: MemorySample,
    threshold: float,
    now: float,
    memory: str = "host",
) -> Action | None:
    """One step against memory pressure, or None (no pressure, or no candidate).

    Downsize the most disposable idle model while downsizing the candidates can free
    enough to get below the threshold; otherwise evict the most disposable one. A
    sample of the GPU's memory (`memory` "gpu") is relieved by models on the GPU only."""
    if not is_under_pressure(sample, threshold):
        return None
    found = candidates(views)
    if memory == "gpu":
        found = [v for v in found if v.vram_bytes > 0]
    if not found:
        return None
    excess = sample.used_bytes - threshold * sample.total_bytes
    downsizable = [v for v in found if v.frees(memory) > 0]
    if downsizable and sum(v.frees(memory) for v in downsizable) > excess:
        best = max(downsizable, key=lambda v: eviction_score(v, now))
        return Action(Step.DOWNSIZE, best.model_name)
    best = max(found, key=lambda v: eviction_score(v, now))
    return Action(Step.EVICT, best.model_name)
