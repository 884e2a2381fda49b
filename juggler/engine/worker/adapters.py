"""A worker's LoRA adapters (seed 004's dynamic LoRA serving): which are loaded, which
one its context applies, and the pure choice of where a new one goes.

Seed 004: "MaxActiveAdapter: Maximum number of adapters that can be loaded to GPU memory
to serve a batch. Requests will be queued if the model server has reached
MaxActiveAdapter and cannot load the requested adapter."

llama.cpp applies adapters per context, and a decode runs with the context's adapters,
so a worker serves several adapters at once by grouping its work by adapter each tick:
one decode per group, switching the applied adapter between them (a pointer swap in
llama.cpp: measured at no cost over a decode with the same adapter; see
bench/bench_lora.py for the whole comparison). The registered adapters (the router's
registry) are the host-side cache; a worker *loads* (`llama_adapter_lora_init`) at most
`max_active` of them. An adapter is *busy* while a session that runs with it has work
(a generation, or input waiting to be decoded); only an adapter that is not busy may be
unloaded to make room, least recently used first. Work whose adapter cannot be loaded
waits (`AdapterSet.can_serve`), and counts as waiting for an adapter.

`AdapterSet` is owned by the worker thread.
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from juggler.engine.llama.ports import Adapter, LlamaModel
from juggler.engine.schedule.messages import AdapterRef
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.session import Session
from juggler.errors import Conflict


@dataclass(frozen=True)
class Slot:
    """Where a new adapter goes: `is_free` (room, or `evict` first), else it must wait."""

    is_free: bool
    evict: str | None = None


def choose_slot(loaded_lru: Sequence[str], busy: Collection[str], max_active: int) -> Slot:
    """Pure: room for one more adapter among `loaded_lru` (least recently used first)
    with at most `max_active` loaded; else the least recently used one that is not busy
    makes way; else none (the work waits)."""
    if len(loaded_lru) < max_active:
        return Slot(True)
    for adapter_id in loaded_lru:
        if adapter_id not in busy:
            return Slot(True, evict=adapter_id)
    return Slot(False)


def busy_adapters(sessions: Iterable[Session]) -> set[str]:
    """Adapters some session needs now: it generates, or holds input to decode."""
    return {
        s.adapter.adapter_id
        for s in sessions
        if s.adapter is not None and (s.generation is not None or (s.pending and s.has_seq))
    }


def can_run(adapters: AdapterSet, s: Session, sessions: Iterable[Session]) -> bool:
    """Whether `s`'s work may run now: it needs no adapter, or its adapter is loaded or
    can be (work waiting for an adapter slot is no work until one frees)."""
    if s.adapter is None or adapters.is_loaded(s.adapter):
        return True
    return adapters.can_serve(s.adapter, busy_adapters(sessions))


def drop_unregistered(adapters: AdapterSet, kv: KvBook, adapter_id: str) -> dict[str, object]:
    """Unload an unregistered adapter; Conflict while a request runs with it. Cached
    prefixes made with it are forgotten (no request can name it any more)."""
    if adapter_id in busy_adapters(kv.table.values()):
        raise Conflict(f"LoRA adapter {adapter_id!r} is in use by a running request")
    for s in list(kv.table.values()):
        if s.adapter_id == adapter_id and s.is_ephemeral:
            kv.evict(s.seq_id)
    kv.parked.entries = [p for p in kv.parked.entries if p.adapter_id != adapter_id]
    return {"adapter_id": adapter_id, "unloaded": adapters.drop(adapter_id)}


class AdapterSet:
    def __init__(self, model: LlamaModel, ctx: ContextSlot, max_active: int) -> None:
        self.model = model
        self.ctx = ctx
        self.max_active = max_active
        #: adapter id -> (its file, the loaded adapter), least recently used first.
        self._loaded: collections.OrderedDict[str, tuple[str, Adapter]] = collections.OrderedDict()
        self.num_loads = 0

    @property
    def loaded(self) -> tuple[str, ...]:
        return tuple(self._loaded)

    def is_loaded(self, ref: AdapterRef | None) -> bool:
        if ref is None:
            return True
        entry = self._loaded.get(ref.adapter_id)
        return entry is not None and entry[0] == ref.path

    def can_serve(self, ref: AdapterRef | None, busy: Collection[str]) -> bool:
        """Whether work with `ref` may run now: it is loaded, or `load` will find room."""
        if self.is_loaded(ref):
            return True
        assert ref is not None
        if ref.adapter_id in self._loaded:  # another file under the same id: reload it
            return ref.adapter_id not in busy
        return choose_slot(tuple(self._loaded), busy, self.max_active).is_free

    def load(self, ref: AdapterRef | None, busy: Collection[str]) -> bool:
        """Make `ref` loaded (unloading a least recently used idle adapter if needed);
        False when every slot is busy. Raises BadRequest for a file that does not fit the
        model (the request that asked is refused, nothing else changes)."""
        if ref is None:
            return True
        if self.is_loaded(ref):
            self._loaded.move_to_end(ref.adapter_id)
            return True
        if not self.can_serve(ref, busy):
            return False
        if ref.adapter_id in self._loaded:
            self.drop(ref.adapter_id)
        else:
            victim = choose_slot(tuple(self._loaded), busy, self.max_active).evict
            if victim is not None:
                self.drop(victim)
        handle = self.model.load_adapter(ref.path)
        self._loaded[ref.adapter_id] = (ref.path, handle)
        self.num_loads += 1
        return True

    def apply(self, ref: AdapterRef | None) -> None:
        """Apply `ref` (loaded) to the context's next decode, or no adapter."""
        if ref is None:
            self.ctx.set_adapter(None)
            return
        entry = self._loaded[ref.adapter_id]
        self._loaded.move_to_end(ref.adapter_id)
        self.ctx.set_adapter(entry[1])

    def drop(self, adapter_id: str) -> bool:
        """Unload an adapter (the caller checked that nothing needs it)."""
        entry = self._loaded.pop(adapter_id, None)
        if entry is None:
            return False
        if not self.ctx.is_released:
            self.ctx.set_adapter(None)  # never leave a freed adapter applied
        self.model.free_adapter(entry[1])
        return True

    def close(self) -> None:
        for adapter_id in list(self._loaded):
            self.drop(adapter_id)
