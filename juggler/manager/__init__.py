"""Model residency: which backends are loaded, and which one leaves when room runs out.

API for routes and the CLI (all methods run on the router's event loop)::

    manager = Manager(settings, registry)      # registry: anything with .get(name) -> ModelInfo
    await manager.start()                      # starts the owner task
    ...
    await manager.stop()                       # fails queued loads, ends every backend

    lease = await manager.acquire("Model")     # inference request: auto-loads if needed
    async with lease:                          # (or lease.release(); idempotent)
        ... send the request to lease.backend_url ...
    # on a connection error to lease.backend_url:
    await manager.report_backend_failure(lease)

    snap = await manager.load("Model", LoadOptions(pinned=True, ctx_size=2048))
    names = await manager.unload("Model")      # or unload(None) for all
    snap = await manager.pin("Model", False)
    await manager.set_max_loaded_models((2, 1, 1, 1, 1))   # or 2, or "2 1 1"

    manager.snapshot()     -> list[ServerSnapshot]  (snap.to_health() = all_models_loaded entry)
    manager.most_recent()  -> ServerSnapshot | None (health's model_loaded/checkpoint_loaded)
    manager.max_models()   -> {"llm": 1, "embedding": 1, ...}
    manager.slots_all_pinned(ModelType.LLM) -> bool (seed 002's pre-emptive warning)
    manager.stats()        -> {"loads": n, "evictions": n, "load_failures": n, ...}

Errors (juggler.errors): ModelNotFound (unknown name), CheckpointMissing /
RecipeNotInstalled (404 class; nothing was evicted), LoadFailed (after the evict-all
retry), SlotsPinned (409), ModelNotLoaded (unload/pin of a model not loaded), BadRequest
(bad LoadOptions or limits).

Semantics (seeds 000-002, issue 4):
- `acquire` counts the request in flight and refreshes last use (request start); release
  refreshes it again (completion). A server with a lease out is never evicted; a load
  that needs its slot waits, with no timeout. A model auto-loaded for a request is leased
  to that request by the owner the moment it is ready (auto-load protection). A request
  for a model being evicted waits and loads it again.
- Loads are serialized, one at a time, and the victims are chosen when a load leaves the
  queue (policy.decide, a pure function).
- A failed load (not a missing file) evicts every server and retries once; when nothing
  else was resident there is nothing to free and it fails at once.
- `unload` of a busy model stops routing to it and stops it when its requests finish.
- `set_max_loaded_models` applies lazily: a type above its new limit is evicted down to
  it at that type's next load.
- The `device` of a llamacpp server is what its backend reports on /health (cpu or gpu).
- Opt-in memory management (seed 002): a server loaded with `auto_evict` (LoadOptions or
  settings) is unloaded after `evict_idle_timeout` seconds idle (never while busy or
  pinned). Not done yet: soft downsize (needs an engine endpoint) and the VRAM-pressure
  monitor; `policy.pressure_victim` already picks its victim by seed 002's score.
- Backends run in their own process group and die with the router (PR_SET_PDEATHSIG on
  Linux), so a killed router leaves no model holding memory.

Modules: manager.py (this API), owner.py (the owner task: table + load queue),
helpers.py (the owner's process-I/O tasks), policy.py (pure decisions), wrapped.py (one
backend process), recipes.py (recipe -> device + launch), options.py (load options and
their priority), snapshot.py, lease.py, messages.py.
"""

from __future__ import annotations

from juggler.manager.lease import Lease
from juggler.manager.manager import Manager, ModelSource
from juggler.manager.options import LoadOptions, ResolvedOptions
from juggler.manager.snapshot import ServerSnapshot, ServerState

__all__ = [
    "Lease",
    "LoadOptions",
    "Manager",
    "ModelSource",
    "ResolvedOptions",
    "ServerSnapshot",
    "ServerState",
]
