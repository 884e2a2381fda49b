"""The residency policy: pure functions of data. No I/O, no clock, no logging.

`decide(request, table, limits, evicting)` is called by the owner task when a queued load
leaves the queue (seed 000: "make the eviction policy choices when starting the load for a
specific WrappedServer (i.e., make the choices when the WrappedServer is exiting the
queue, not when its entering the queue)"). The owner carries the Decision out. Rules, in
the order they apply:

0. Evictions in progress: a server being evicted still holds its slot and its memory, so
   a load waits while one of its own type, or one it conflicts with on the NPU, is still
   being evicted. Evictions of other types do not hold it up (a slow eviction of an
   embedding model does not delay an LLM load). The evict-all retry waits for every
   eviction: it frees everything before it tries again.
1. Evict-all retry: after a failed load, every server of every type is a victim
   (seed 000 "evict all WrappedServers of every type"; pinned ones too: the rule is
   deliberately "nuclear").
2. The same model already loaded with the same launch options is a no-op; with other
   launch options it is a victim (reload).
3. NPU rules (seed 002): `flm`, `ryzenai-llm`, `whispercpp` (and seed 000's `oga-*`) are
   mutually exclusive; `flm` holds at most one model per type (one ASR, one LLM, one
   embedding); every other NPU backend holds exactly one model. A conflicting pinned NPU
   server refuses the load (SlotsPinned).
4. Type slots: while the type is full, evict the least recently used unpinned server of
   that type (a server with a request in flight counts as used now, so idle servers go
   first); if only pinned servers remain, refuse (409 slots_pinned_error). A limit of -1
   is unlimited. A lowered limit evicts down to it here, at the type's next load.
5. VRAM (issue 48: "when a new model does not fit, the least recently used idle models
   on that GPU are evicted (busy and pinned ones never), exactly as seed 000's rules do
   for slots"): a load that needs `vram_bytes` of the GPU, more than is free
   (`VramState.free_bytes`) plus what the victims above hold, evicts the least recently
   used unpinned servers on the GPU until it fits. If even all of them would not make
   room, none is evicted for it: the load goes ahead with what it has (its layers were
   planned for the VRAM there was). A GPU load also waits for evictions of servers on the
   GPU (their memory is not free until their process is gone).
6. Busy protection: if any victim has a request in flight, nothing is evicted yet; the
   load waits (no timeout) and is decided again when something changes.

`retry_after_failure` is seed 000's error rule for a load that failed; `all_slots_pinned`
is seed 002's pre-emptive warning. Seed 002's memory management is `pressure.py`.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from juggler.errors import is_missing_file
from juggler.manager.recipes import NpuBackend
from juggler.types import Device, ModelType


class Verdict(enum.Enum):
    NOOP = "noop"  # already loaded with these options: refresh last use
    LOAD = "load"  # evict `victims` (maybe none), then load
    WAIT = "wait"  # busy victims or evictions in progress: keep the load at the queue head
    REFUSE = "refuse"  # every candidate is pinned: SlotsPinned


@dataclass(frozen=True)
class ServerView:
    """What the policy needs to know about one server in the table."""

    model_name: str
    type: ModelType
    device: Device
    last_use: float
    npu_backend: NpuBackend | None = None
    in_flight: int = 0
    pinned: bool = False
    launch_key: Hashable = None
    #: What it holds on the GPU (0: nothing).
    vram_bytes: int = 0

    @property
    def is_busy(self) -> bool:
        return self.in_flight > 0


@dataclass(frozen=True)
class LoadRequest:
    """One load leaving the queue. `launch_key` None means "any options will do"
    (an auto-load for a request); `evict_all` is set for the retry after a failure."""

    model_name: str
    type: ModelType
    device: Device
    npu_backend: NpuBackend | None = None
    launch_key: Hashable = None
    evict_all: bool = False
    #: What the load is estimated to need of the GPU (0: nothing).
    vram_bytes: int = 0


@dataclass(frozen=True)
class VramState:
    """The GPU's memory as the policy reads it when a load leaves the queue."""

    free_bytes: int


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    victims: tuple[str, ...] = ()
    #: For WAIT: the busy victims, or the servers whose eviction must end first.
    waiting_for: tuple[str, ...] = ()
    reason: str = ""


def _npu_conflicts(request: LoadRequest, server: ServerView) -> bool:
    """Whether `server` must leave the NPU for `request` to load."""
    if not (request.device & Device.NPU and server.device & Device.NPU):
        return False
    if server.npu_backend != request.npu_backend or server.npu_backend is None:
        return True  # different backends are mutually exclusive
    if request.npu_backend is NpuBackend.FLM:
        return server.type == request.type  # flm: one ASR + one LLM + one embedding
    return True  # ryzenai-llm, whispercpp, oga, exclusive: one model holds the whole NPU


def blocking_evictions(request: LoadRequest, evicting: Sequence[ServerView]) -> tuple[str, ...]:
    """Rule 0: the servers being evicted that `request` must wait for (their slot and
    memory are not free yet): those of its type, and those it conflicts with on the NPU;
    every one for the evict-all retry."""
    return tuple(
        s.model_name
        for s in evicting
        if request.evict_all
        or s.type == request.type
        or _npu_conflicts(request, s)
        or (request.vram_bytes > 0 and s.vram_bytes > 0)
    )


def _lru_order(server: ServerView) -> tuple[bool, float]:
    # A server with a request in flight is being used right now.
    return (server.is_busy, server.last_use)


def decide(
    request: LoadRequest,
    table: Sequence[ServerView],
    limits: Mapping[ModelType, int],
    evicting: Sequence[ServerView] = (),
    vram: VramState | None = None,
) -> Decision:
    """Choose what must leave before `request` loads. `table` holds the ready servers
    (one per model name), `evicting` the servers being evicted; `limits` maps a type to
    its slots (-1 unlimited); `vram` the GPU's free memory (None: not known, rule 5
    does not apply)."""
    blocked = blocking_evictions(request, evicting)
    if blocked:
        return Decision(Verdict.WAIT, (), blocked, reason="waiting for evictions to end")
    if request.evict_all:
        return _finish(tuple(s.model_name for s in table), table)

    victims: list[str] = []
    same = next((s for s in table if s.model_name == request.model_name), None)
    if same is not None:
        if request.launch_key is None or same.launch_key == request.launch_key:
            return Decision(Verdict.NOOP, reason="already loaded")
        victims.append(same.model_name)

    for server in table:
        if server.model_name in victims or not _npu_conflicts(request, server):
            continue
        if server.pinned:
            return Decision(
                Verdict.REFUSE,
                reason=f"The NPU is held by pinned model {server.model_name!r}; "
                f"unpin or unload it to load {request.model_name!r}",
            )
        victims.append(server.model_name)

    limit = limits.get(request.type, 1)
    if limit != -1:
        same_type = [
            s
            for s in table
            if s.type == request.type
            and s.model_name not in victims
            and s.model_name != request.model_name
        ]
        need = len(same_type) + 1 - limit
        if need > 0:
            candidates = sorted((s for s in same_type if not s.pinned), key=_lru_order)
            if len(candidates) < need:
                return Decision(
                    Verdict.REFUSE,
                    reason=f"All {limit} {request.type.value} slot(s) are held by pinned "
                    f"models; unpin or unload one to load {request.model_name!r}",
                )
            victims.extend(s.model_name for s in candidates[:need])
    if vram is not None and request.vram_bytes > 0:
        victims.extend(_vram_victims(request, table, victims, vram))
    return _finish(tuple(victims), table)


def _vram_victims(
    request: LoadRequest, table: Sequence[ServerView], victims: Sequence[str], vram: VramState
) -> list[str]:
    """Rule 5: the least recently used unpinned servers on the GPU that make room."""
    room = vram.free_bytes + sum(s.vram_bytes for s in table if s.model_name in victims)
    if request.vram_bytes <= room:
        return []
    more: list[str] = []
    for server in sorted(table, key=_lru_order):
        if server.model_name in victims or server.pinned or server.vram_bytes <= 0:
            continue
        more.append(server.model_name)
        room += server.vram_bytes
        if request.vram_bytes <= room:
            return more
    return []  # even all of them would not make room: evict nothing for it


def _finish(victims: tuple[str, ...], table: Sequence[ServerView]) -> Decision:
    busy = tuple(s.model_name for s in table if s.model_name in victims and s.is_busy)
    if busy:
        return Decision(Verdict.WAIT, victims, busy, reason="waiting for requests in flight")
    return Decision(Verdict.LOAD, victims)


def retry_after_failure(error: BaseException, *, has_retried: bool, num_others: int) -> bool:
    """Seed 000's error rule for a failed load: True when every server should be evicted
    and the load tried once more. Never for a missing file ("Do not evict models if the
    WrappedServer failed to load because a file was not found on disk"), never twice, and
    not when no other server is ready (`num_others`): there is nothing to free."""
    if is_missing_file(error):
        return False
    return not has_retried and num_others > 0


def all_slots_pinned(
    model_type: ModelType, table: Sequence[ServerView], limits: Mapping[ModelType, int]
) -> bool:
    """Seed 002's pre-emptive warning: every slot of `model_type` holds a pinned model."""
    limit = limits.get(model_type, 1)
    same_type = [s for s in table if s.type == model_type]
    return limit != -1 and len(same_type) >= limit and all(s.pinned for s in same_type)
