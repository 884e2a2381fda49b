"""What the backends report, kept fresh in the router so /metrics never fans out.

Issue 12, from the Gateway API Inference Extension's endpoint picker: it "polls `GET
/metrics` every 50 ms under a 1 s deadline [...] So `/metrics` must answer fast under
load: serve it from state the router already holds, never by fanning out to backends per
scrape."

`FiguresPoller` is one asyncio task and the only writer of the figures. While anyone has
scraped in the last `ACTIVE_S` seconds it asks every ready llama.cpp backend for its
/stats every `interval_s` (100 ms), concurrently and each under a short deadline; when
nobody scrapes, it sleeps, so an idle server does no work for metrics. A scrape reads the
latest figures; only when they are older than `STALE_S` (the first scrape after a quiet
spell) does it wait, at most `STALE_S`, for the next poll.

Counters and histograms must never go down: when a backend goes away (unloaded, evicted,
restarted), its last figures are added to `retired`, which every view includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from juggler.api.histogram import TPOT_BUCKETS, TTFT_BUCKETS, Histogram
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.router.core.backend_http import BackendPool

log = logging.getLogger("juggler.router")

INTERVAL_S = 0.1
ACTIVE_S = 30.0
STALE_S = 1.0
FETCH_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class Totals:
    """Counters and histograms that only grow."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))
    #: Requests finished, and prompt tokens served from a cached prefix (Lemonade's
    #: `request_count_total` and `cache_tokens_total`).
    requests: int = 0
    cache_tokens: int = 0

    def plus(self, other: Totals) -> Totals:
        ttft, tpot = Histogram(TTFT_BUCKETS), Histogram(TPOT_BUCKETS)
        for h, a, b in ((ttft, self.ttft, other.ttft), (tpot, self.tpot, other.tpot)):
            h.add(a)
            h.add(b)
        return Totals(
            self.prompt_tokens + other.prompt_tokens,
            self.generation_tokens + other.generation_tokens,
            ttft,
            tpot,
            requests=self.requests + other.requests,
            cache_tokens=self.cache_tokens + other.cache_tokens,
        )


def lemonade_counters(totals: Totals) -> dict[str, int]:
    """Lemonade's cumulative counters (`/api/v1/stats`, and its `lemonade_*_total` metrics) from `totals` (prompt tokens include the
    cached ones, as its `prompt_tokens` does; Juggler counts each prompt token once, so
    `input_tokens_total` is the same number)."""
    return {
        "request_count_total": totals.requests,
        "input_tokens_total": totals.prompt_tokens,
        "output_tokens_total": totals.generation_tokens,
        "prompt_tokens_total": totals.prompt_tokens,
        "cache_tokens_total": totals.cache_tokens,
        "routing_decisions_total": 0,
        "routing_switches_total": 0,
    }


#: A backend's figures of its latest finished request (Lemonade's per-model telemetry).
LAST_REQUEST_KEYS = (
    "input_tokens",
    "output_tokens",
    "prompt_tokens",
    "cache_tokens",
    "time_to_first_token",
    "tokens_per_second",
)


@dataclass(frozen=True)
class BackendFigures:
    """What one ready backend reported (zeros until it answered)."""

    model: str
    model_type: str
    device: str
    checkpoint: str = ""
    recipe: str = ""
    running: int = 0
    waiting: int = 0
    kv_used: int = 0
    kv_total: int = 0
    tokens_running: int = 0
    tokens_waiting: int = 0
    in_flight: int = 0
    pinned: bool = False
    totals: Totals = field(default_factory=Totals)
    #: LoRA adapters applied now / wanted by waiting requests (seed 004), and the limit.
    running_adapters: tuple[str, ...] = ()
    waiting_adapters: tuple[str, ...] = ()
    max_lora: int = 0
    #: Its latest finished request (LAST_REQUEST_KEYS that it reported).
    last_request: dict[str, float] = field(default_factory=dict)

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_total if self.kv_total else 0.0


def base_figures(snap: ServerSnapshot) -> BackendFigures:
    running = snap.in_flight if snap.recipe != "llamacpp" else 0  # others lack our /stats
    return BackendFigures(
        model=snap.model_name,
        model_type=snap.type.value,
        device=snap.device.label(),
        checkpoint=snap.checkpoint,
        recipe=snap.recipe,
        in_flight=snap.in_flight,
        pinned=snap.pinned,
        running=running,
    )


def parse_stats(base: BackendFigures, data: dict[str, Any]) -> BackendFigures:
    """A backend's /stats body as figures (missing fields read as 0)."""

    def num(key: str) -> int:
        value = data.get(key)
        return int(value) if isinstance(value, int | float) else 0

    hist = data.get("histograms") or {}
    lora = data.get("lora") or {}
    return replace(
        base,
        running=num("requests_running"),
        waiting=num("requests_waiting"),
        kv_used=num("kv_cells_used"),
        kv_total=num("kv_cells_total"),
        tokens_running=num("tokens_running"),
        tokens_waiting=num("tokens_waiting"),
        totals=Totals(
            num("prompt_tokens_prefilled_total") + num("prompt_tokens_reused_total"),
            num("generation_tokens_total"),
            Histogram.from_json(TTFT_BUCKETS, hist.get("time_to_first_token_seconds")),
            Histogram.from_json(TPOT_BUCKETS, hist.get("time_per_output_token_seconds")),
            requests=num("requests_finished_total"),
            cache_tokens=num("prompt_tokens_reused_total"),
        ),
        last_request={
            k: v
            for k in LAST_REQUEST_KEYS
            if isinstance(v := data.get(k), int | float) and not isinstance(v, bool)
        },
        running_adapters=tuple(str(a) for a in lora.get("running", ())),
        waiting_adapters=tuple(str(a) for a in lora.get("waiting", ())),
        max_lora=int(lora.get("max_active", 0) or 0),
    )


class FiguresPoller:
    def __init__(
        self,
        servers: Callable[[], list[ServerSnapshot]],
        pool: BackendPool,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._servers = servers
        self._pool = pool
        self.interval_s = interval_s
        #: server_id -> its latest figures (ready servers only).
        self._latest: dict[int, BackendFigures] = {}
        self.retired = Totals()
        #: Per model, the totals of its backends that are gone, and its latest figures
        #: (every model observed since start: Lemonade's `lemonade_model_*` series).
        self.retired_by_model: dict[str, Totals] = {}
        self.seen: dict[str, BackendFigures] = {}
        self.num_polls = 0
        #: When the server-wide LoRA state last changed (vllm:lora_requests_info's value).
        self.lora_changed_at = time.time()
        self._lora_state: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._polled_at = 0.0
        #: When the last finished poll started (its figures were read after that).
        self._read_since = 0.0
        self._scraped_at = 0.0
        self._active_at = 0.0
        self._wake = asyncio.Event()
        self._polled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="figures")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def figures(self, max_age_s: float = STALE_S) -> list[BackendFigures]:
        """The ready backends' latest figures, for a scrape (never a fan-out). Older than
        `max_age_s`, they are read again first (waiting at most STALE_S); 0: read after
        this call (Lemonade's /stats, whose counters must include the last request)."""
        now = self._scraped_at = time.monotonic()
        if now - self._polled_at > max_age_s and self._task is not None:
            while self._read_since < now and time.monotonic() - now < STALE_S:
                self._polled.clear()
                self._wake.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._polled.wait(), STALE_S)
        ready = [s for s in self._servers() if s.status is ServerState.READY]
        return [self._latest.get(s.server_id) or base_figures(s) for s in ready]

    def totals(self, live: list[BackendFigures]) -> Totals:
        """Server-wide totals: the backends that are gone and `live` (the ready ones)."""
        out = self.retired
        for figures in live:
            out = out.plus(figures.totals)
        return out

    def note_activity(self) -> None:
        """A request went to a backend: poll for the next ACTIVE_S seconds, so that
        its counters are read before its backend can go away (Lemonade's `/stats`
        totals never go down)."""
        self._active_at = time.monotonic()
        if not self._wake.is_set():
            self._wake.set()

    async def _run(self) -> None:
        while True:
            if time.monotonic() - max(self._scraped_at, self._active_at) > ACTIVE_S:
                self._wake.clear()
                await self._wake.wait()  # nobody scrapes: no polling
            started = time.monotonic()
            try:
                await self._poll()
            except Exception:  # one bad poll must not end metrics
                log.exception("metrics: polling backends failed")
            self._read_since = started
            self._polled_at = time.monotonic()
            self.num_polls += 1
            self._polled.set()
            await asyncio.sleep(self.interval_s)

    async def _poll(self) -> None:
        ready = [s for s in self._servers() if s.status is ServerState.READY]
        fetched = await asyncio.gather(*(self._fetch(s) for s in ready))
        latest = {s.server_id: f for s, f in zip(ready, fetched, strict=True)}
        for sid, gone in self._latest.items():
            if sid not in latest:
                self.retired = self.retired.plus(gone.totals)
                before = self.retired_by_model.get(gone.model, Totals())
                self.retired_by_model[gone.model] = before.plus(gone.totals)
        self._latest = latest
        for figures in latest.values():
            self.seen[figures.model] = figures
        lora = (
            tuple(sorted({a for f in latest.values() for a in f.running_adapters})),
            tuple(sorted({a for f in latest.values() for a in f.waiting_adapters})),
        )
        if lora != self._lora_state:
            self._lora_state = lora
            self.lora_changed_at = time.time()

    async def _fetch(self, snap: ServerSnapshot) -> BackendFigures:
        base = self._latest.get(snap.server_id) or base_figures(snap)
        base = replace(base, in_flight=snap.in_flight, pinned=snap.pinned)
        if snap.recipe != "llamacpp":
            return replace(base, running=snap.in_flight)
        try:
            data = await self._pool.get_json(snap.backend_url + "/stats", FETCH_TIMEOUT_S)
        except (httpx.HTTPError, ValueError, TimeoutError):
            return base  # keep what it said last
        return parse_stats(base, data) if isinstance(data, dict) else base
