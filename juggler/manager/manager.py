"""The Manager: the public face of model residency (routes and the CLI call this).

Each method runs in the caller's task: it does the blocking-ish preparation there
(options, registry look-up, checkpoint and executable checks, off the loop in a thread),
then sends one typed message to the owner task (owner.py) and awaits its Future.
Nothing here touches the residency table: the read methods read the immutable
`TableSnapshot` the owner published last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import httpx
from pydantic import BaseModel

from juggler.backend_key import BackendAuth, BackendKeys
from juggler.config import Settings, parse_max_loaded_models
from juggler.errors import BadRequest, JugglerError
from juggler.logbook import LogBook
from juggler.manager import messages as m
from juggler.manager.compute import LINGER_S, ComputePlanner
from juggler.manager.lease import Lease
from juggler.manager.memory import MemorySource, SystemMemorySource, choose_device_source
from juggler.manager.monitor import INTERVAL_S, Monitor
from juggler.manager.owner import Owner
from juggler.manager.planner import Backends, LoadPlanner, gpu_view
from juggler.manager.policy import all_slots_pinned
from juggler.manager.process import ProcessSpawner
from juggler.manager.recipes import LaunchPlan, Resolver
from juggler.manager.snapshot import MemoryStatus, ServerSnapshot, TableSnapshot
from juggler.manager.spawner import Spawner
from juggler.manager.stall_watch import INTERVAL_S as STALL_INTERVAL_S
from juggler.manager.stall_watch import StallWatch
from juggler.manager.table import ServerTable
from juggler.manager.vram import VramReader
from juggler.options import ModelOptions
from juggler.types import MODEL_TYPE_ORDER, ModelInfo, ModelType

log = logging.getLogger("juggler.manager")
T = TypeVar("T")


class ModelSource(Protocol):
    """The registry as the manager sees it."""

    def get(self, name: str) -> ModelInfo:
        """The model called `name`; raises ModelNotFound."""
        ...


#: How long report_backend_failure waits for the owner's verdict.
PROBE_WAIT_S = 5.0


class Manager:
    """Model residency for one router process. Create it, `await start()`, and
    `await stop()` at shutdown (it ends every backend process it started). `spawner`
    starts backends (default: child processes, their output also written to `logbook`;
    tests pass a fake)."""

    def __init__(
        self,
        settings: Settings,
        registry: ModelSource,
        *,
        resolve: Resolver | None = None,
        spawner: Spawner | None = None,
        log_dir: Path | None = None,
        memory_source: MemorySource | None = None,
        vram_source: MemorySource | Literal["auto"] | None = "auto",
        gpu_backends: Backends | None = None,
        monitor_interval_s: float = INTERVAL_S,
        logbook: LogBook | None = None,
        saved_options: Callable[[str], Mapping[str, Any]] | None = None,
        compute_cpus: tuple[int, ...] | None = None,
        compute_linger_s: float = LINGER_S,
        stall_interval_s: float = STALL_INTERVAL_S,
    ) -> None:
        self.settings = settings
        #: A model's saved load options (Lemonade's save_options), under a load's own.
        self._saved = saved_options or (lambda name: {})
        self.registry = registry
        #: Options -> launch plan, with every check a load runs (issue 52: on saved
        #: options too), in the memory a load can have.
        self.plans = LoadPlanner(
            lambda: self.settings,
            registry,
            resolve,
            lambda: [s.pid for s in self.snapshot() if s.pid is not None],
            lambda: gpu_view(self.vram, self.snapshot(), gpu_backends),
        )
        self._spawner: Spawner = spawner or ProcessSpawner(logbook)
        keys = getattr(self._spawner, "keys", None)
        #: Adds each backend's key to the router's requests to it (issue 27).
        self.backend_auth: httpx.Auth | None = (
            BackendAuth(keys) if isinstance(keys, BackendKeys) else None
        )
        #: Where memory pressure is read: host memory (system memory unless given), and
        #: the GPU's (issue 48; chosen at start: NVML or AMD sysfs, else none; a test that
        #: gives its own host source gets no GPU source unless it gives one too).
        self.memory_source = memory_source
        given_host = memory_source is not None
        self._vram_source = None if given_host and vram_source == "auto" else vram_source
        #: The GPU's memory and each backend's share (no source until `start`).
        self.vram = VramReader(None)
        #: The cores the compute plan divides (default: this process's) and its linger.
        self._compute_cpus = compute_cpus
        self._compute_linger_s = compute_linger_s
        #: Asks ready backends whether they are stalled (issue 27).
        self._stall_watch = StallWatch(
            self.snapshot, self._backend_status, self._post, stall_interval_s
        )
        self._monitor_interval_s = monitor_interval_s
        self._probe_client: httpx.AsyncClient | None = None
        self._monitor: Monitor | None = None
        self._log_dir = log_dir
        self._owns_log_dir = log_dir is None
        self._inbox: asyncio.Queue[m.Message] = asyncio.Queue()
        self._published = TableSnapshot(limits=settings.max_loaded_models)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Start the owner task on the running loop. Returns at once."""
        if self._task is not None:
            return
        self._loop = loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()  # bound to this loop
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="juggler-backends-"))
        given = self._vram_source
        vram = await asyncio.to_thread(choose_device_source) if given == "auto" else given
        if self.memory_source is None:
            self.memory_source = await asyncio.to_thread(SystemMemorySource)
        self.vram = VramReader(vram)
        sources = [s for s in (vram, self.memory_source) if s is not None]
        self._monitor = Monitor(sources[0], self._post, self._monitor_interval_s, sources[1:])
        owner = Owner(
            table=ServerTable(self._log_dir),
            spawner=self._spawner,
            limits=self.settings.max_loaded_models,
            load_timeout_s=self.settings.load_timeout_s,
            inbox=self._inbox,
            post=self._post,
            publish=self._on_publish,
            monitor=self._monitor,
            auto_evict=self.settings.auto_evict,
            threshold=self.settings.auto_evict_threshold_pct,
            vram=self.vram,
            compute=ComputePlanner(
                enabled=self.settings.compute_plan,
                cpus=self._compute_cpus,
                linger_s=self._compute_linger_s,
                wake=lambda delay: loop.call_later(delay, self._post, m.Replan()),
            ),
        )
        self._task = asyncio.create_task(owner.run(), name="juggler-manager")
        self._stall_watch.start()

    async def stop(self) -> None:
        """Fail queued loads, stop every backend (SIGTERM, then SIGKILL), end the owner.
        Blocks until every child process is gone."""
        if self._task is None or self._task.done():
            return
        await self._stall_watch.stop()
        if self._probe_client is not None:
            await self._probe_client.aclose()
        await self._ask(lambda f: m.Stop(f))
        await self._task
        if self._owns_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    @property
    def log_dir(self) -> Path | None:
        """Where backend stdout/stderr logs go (one file per load)."""
        return self._log_dir

    # -- requests ------------------------------------------------------------------------
    async def acquire(self, model_name: str, overrides: Mapping[str, Any] | None = None) -> Lease:
        """A lease on a ready backend for one inference request. Blocks while the model is
        auto-loaded (queued behind other loads, waiting for busy victims with no timeout)
        or while it is being evicted (then it is loaded again). An auto-load takes
        `overrides` over the model's saved options (a loaded model keeps its own). The
        request is counted in flight from the moment the lease exists: release it when
        the response ends. Raises ModelNotFound, CheckpointMissing/RecipeNotInstalled
        (nothing evicted), LoadFailed, SlotsPinned, BadRequest (a bad override)."""
        lease: Lease | None = await self._ask(lambda f: m.Acquire(model_name, None, f))
        if lease is None:
            canonical = self.registry.get(model_name).name  # an alias names its model
            if canonical != model_name:
                return await self.acquire(canonical, overrides)
            saved = self._saved(model_name)
            options = self.settings.model_options(dict(overrides or {}), saved=saved)
            plan = await self._prepare(model_name, options)
            lease = await self._ask(lambda f: m.Acquire(model_name, plan, f))
        assert lease is not None
        return lease

    async def lease(self, server_id: int) -> Lease:
        """A lease on server `server_id` (a `ServerSnapshot.server_id`) if it is ready;
        never loads anything. Raises ModelNotLoaded when that server is loading, being
        evicted, dead or gone (a reloaded model is another server)."""
        lease: Lease = await self._ask(lambda f: m.LeaseServer(server_id, f))
        return lease

    async def load(
        self,
        model_name: str,
        overrides: Mapping[str, Any] | BaseModel | None = None,
        *,
        pinned: bool | None = None,
        ignore_saved: Collection[str] = (),
    ) -> ServerSnapshot:
        """Explicit /load. `overrides` are the body's per-model options (None values: not
        given), merged over the model's saved options (less those in `ignore_saved`: a
        body's explicit nulls) and then the settings (Lemonade's priority order: load
        body > saved options > CLI/env/config) and checked before anything is queued: a
        bad one raises BadRequest and evicts nothing. Same model with the same launch
        options: no-op that refreshes its last use (and applies `pinned` if given); other
        options: reload. Blocks until the model is ready. Raises as `acquire` does."""
        given = (
            overrides.model_dump() if isinstance(overrides, BaseModel) else dict(overrides or {})
        )
        saved = {k: v for k, v in self._saved(model_name).items() if k not in ignore_saved}
        options = self.settings.model_options(given, saved=saved)
        plan = await self._prepare(model_name, options)
        snapshot: ServerSnapshot = await self._ask(lambda f: m.Load(plan, pinned, f))
        return snapshot

    async def unload(self, model_name: str | None = None) -> list[str]:
        """Unload one model, or all when `model_name` is None; returns the names
        unloaded. A model with requests in flight stops taking new ones and is stopped
        when they finish; this call blocks until its process is gone. Raises
        ModelNotLoaded("Model not loaded: X")."""
        stopping: list[tuple[str, asyncio.Future[None]]] = await self._ask(
            lambda f: m.Unload(model_name, f)
        )
        await asyncio.gather(*(done for _, done in stopping))
        return [name for name, _ in stopping]

    async def pin(self, model_name: str, pinned: bool = True) -> ServerSnapshot:
        """Pin or unpin a loaded model without reloading. Raises ModelNotLoaded."""
        snapshot: ServerSnapshot = await self._ask(lambda f: m.Pin(model_name, pinned, f))
        return snapshot

    async def set_max_loaded_models(self, limits: int | tuple[int, ...] | list[int] | str) -> None:
        """Change the slots per type at run time (one value for every type, or up to five
        in llm, embedding, reranking, audio, image order, padded with 1; -1 unlimited).
        Applied lazily: nothing is evicted now; a type above its new limit is evicted
        down to it (LRU, never busy ones) at that type's next load. Raises BadRequest."""
        try:
            parsed = parse_max_loaded_models(limits)
        except ValueError as exc:
            raise BadRequest(f"max_loaded_models: {exc}", param="max_loaded_models") from None
        await self._ask(lambda f: m.SetLimits(parsed, f))

    async def set_memory_config(
        self, *, auto_evict: bool | None = None, threshold: float | None = None
    ) -> None:
        """Seed 002's global switch and threshold, at run time (None: unchanged). Turning
        `auto_evict` on starts the memory monitor; off stops it unless a model opted in
        on its own. Raises BadRequest for a threshold outside (0, 1]."""
        if threshold is not None and not 0 < threshold <= 1:
            raise BadRequest(
                "auto_evict_threshold_pct must be above 0 and at most 1",
                param="auto_evict_threshold_pct",
            )
        await self._ask(lambda f: m.SetMemory(auto_evict, threshold, f))

    async def simulate_pressure(self, pct: float) -> list[tuple[str, str]]:
        """Lemonade's `/internal/simulate-vram-pressure`: `pct` (a 0..1 fraction) at or
        above the threshold runs one pressure step as if memory use were `pct`; -1 runs
        the idle timeouts now; any other value does nothing. Returns the (model, action)
        pairs taken, once downsizes are done and evictions have started."""
        sample = await self._monitor.sample_now() if self._monitor is not None else None
        total = sample.total_bytes if sample is not None else 0
        done: list[tuple[str, str]] = await self._ask(lambda f: m.Simulate(pct, total, f))
        return done

    def memory_status(self) -> MemoryStatus | None:
        """The global switch, threshold, source and last sample (health)."""
        return self._published.memory

    async def report_backend_failure(self, lease: Lease) -> None:
        """The router could not reach `lease`'s backend. The owner checks it: a dead
        process is dropped at once, a live one is probed and stopped if it does not
        answer. Returns once the owner has decided (so a retry never gets the same dead
        backend), or after PROBE_WAIT_S at most."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._post(m.Probe(lease.server_id, future))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), PROBE_WAIT_S)

    # -- reads (no waiting; the owner's last published snapshot) ------------------------
    def snapshot(self) -> list[ServerSnapshot]:
        """Every server in the table, including ones loading or being evicted."""
        return list(self._published.servers)

    def most_recent(self) -> ServerSnapshot | None:
        """The most recently loaded ready server (health's model_loaded)."""
        return self._published.most_recent

    def max_models(self) -> dict[str, int]:
        return {t.value: n for t, n in zip(MODEL_TYPE_ORDER, self._published.limits, strict=True)}

    def slots_all_pinned(self, model_type: ModelType) -> bool:
        """Seed 002's pre-emptive warning: every slot of this type holds a pinned model."""
        published = self._published
        return all_slots_pinned(model_type, published.views, published.limits_by_type())

    def restarts(self) -> dict[str, Any]:
        """The watchdog's view (health): pending restarts and the models it gave up on."""
        published = self._published
        return {
            "restarting": [
                {"model_name": name, "attempt": attempt + 1, "due_at": due_at}
                for name, attempt, due_at in published.restarting
            ],
            "gave_up": list(published.gave_up),
        }

    def stats(self) -> dict[str, int]:
        """Counters since start: loads, load_failures, evictions, backend_deaths,
        backend_restarts, restart_give_ups, idle_evictions (each once it happened), and
        queued (loads queued or running)."""
        if self._task is None:
            return {}
        return {**dict(self._published.counters), "queued": self._published.num_queued}

    async def _backend_status(self, snap: ServerSnapshot) -> str | None:
        """A backend's own word on its health (`status` of its /health), None if none.
        One client for every probe: making one reads the CA store (tens of ms)."""
        if self._probe_client is None:
            self._probe_client = httpx.AsyncClient(
                trust_env=False, timeout=5.0, auth=self.backend_auth
            )
        try:
            response = await self._probe_client.get(snap.backend_url + "/health")
            status = response.json().get("status")
            return str(status) if status is not None else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    # -- plumbing ------------------------------------------------------------------------
    async def resolved_ctx_size(self, model_name: str, options: ModelOptions) -> int:
        """lemonade.md's `resolved_ctx_size` (`LoadPlanner.resolved_ctx_size`)."""
        return await self.plans.resolved_ctx_size(model_name, options)

    async def check_options(self, model: str | ModelInfo, options: ModelOptions) -> None:
        """A load's checks on `options`, nothing loaded (`LoadPlanner.check`)."""
        await self.plans.check(model, options)

    async def _prepare(self, model_name: str, options: ModelOptions) -> LaunchPlan:
        return await self.plans.prepare(model_name, options)

    def _on_publish(self, published: TableSnapshot) -> None:
        self._published = published

    def _post(self, msg: m.Message) -> None:
        """Send a message to the owner; callable from the loop or from another thread."""
        if self._loop is None or self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._inbox.put_nowait(msg)
        else:
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, msg)

    async def _ask(self, make: Callable[[asyncio.Future[T]], m.Message]) -> T:
        """Post the message `make(future)` and await its answer. A caller cancelled after
        the owner handed it a lease gives the lease back."""
        if self._task is None or self._task.done():
            raise JugglerError("The model manager is not running")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._post(make(future))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                result = future.result()
                if isinstance(result, Lease):
                    result.release()
            raise
