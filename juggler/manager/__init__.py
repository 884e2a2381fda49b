"""Model residency: which backends are loaded, and which one leaves when room runs out.

API for routes and the CLI (all methods run on the router's event loop)::

    manager = Manager(settings, registry)      # registry: anything with .get(name) -> ModelInfo
    # (optional: resolve=checkpoint resolver, spawner=Spawner, log_dir=Path)
    await manager.start()                      # starts the owner task
    ...
    await manager.stop()                       # fails queued loads, ends every backend

    lease = await manager.acquire("Model")     # inference request: auto-loads if needed
    async with lease:                          # (or lease.release(); idempotent)
        ... send the request to lease.backend_url ...
    # on a connection error to lease.backend_url:
    await manager.report_backend_failure(lease)
    lease = await manager.lease(server_id)     # that exact server if ready; never loads
                                               # (session routes); else ModelNotLoaded

    snap = await manager.load("Model", {"ctx_size": 2048}, pinned=True)
    names = await manager.unload("Model")      # or unload(None) for all
    snap = await manager.pin("Model", False)
    await manager.set_max_loaded_models((2, 1, 1, 1, 1))   # or 2, or "2 1 1"

    manager.snapshot()     -> list[ServerSnapshot]  (snap.to_health() = all_models_loaded
                                                     entry; snap.server_id for lease())
    manager.most_recent()  -> ServerSnapshot | None (health's model_loaded/checkpoint_loaded)
    manager.max_models()   -> {"llm": 1, "embedding": 1, ...}
    manager.slots_all_pinned(ModelType.LLM) -> bool (seed 002's pre-emptive warning)
    manager.stats()        -> {"loads": n, "evictions": n, "load_failures": n, ...}
    manager.log_dir        -> where backend logs go

A Lease carries server_id, backend_url, pid, model_name, info, device and release().

Errors (juggler.errors): BadRequest (a bad load option, llamacpp_args, limits or
`command` template; raised before anything is queued, so nothing is evicted),
ModelNotFound (unknown name), CheckpointMissing / RecipeNotInstalled (404, missing-file
class; nothing was evicted), LoadFailed (after the evict-all retry), SlotsPinned (409),
ModelNotLoaded (unload/pin/lease of a model or server not loaded).

Semantics (seeds 000-002, issues 4 and 9):
- `acquire` counts the request in flight and refreshes last use (request start); release
  refreshes it again (completion). A server with a lease out is never evicted; a load
  that needs its slot waits, with no timeout. A model auto-loaded for a request is leased
  to that request by the owner the moment it is ready (auto-load protection). A request
  for a model being evicted waits and loads it again.
- Loads are serialized, one at a time, and the victims are chosen when a load leaves the
  queue (policy.decide, a pure function). A load also waits while a server of its own
  type, or one it conflicts with on the NPU, is still being evicted; evictions of other
  types do not hold it up.
- A failed load (not a missing file) evicts every server and retries once; when nothing
  else was resident there is nothing to free and it fails at once
  (policy.retry_after_failure).
- `unload` of a busy model stops routing to it and stops it when its requests finish.
- `set_max_loaded_models` applies lazily: a type above its new limit is evicted down to
  it at that type's next load.
- Load options are `juggler.options.ModelOptions`, resolved by `settings.model_options`;
  the llamacpp backend's engine flags are `EngineFlags` (recipes.py).
- The `device` of a llamacpp server is what its backend reports on /health (cpu or gpu).
- Opt-in memory management (seed 002): a server loaded with `auto_evict` is unloaded
  after `evict_idle_timeout` seconds idle (never while busy or pinned). Soft downsize and
  the memory-pressure monitor are not built (their settings are refused).
- Backends run in their own process group and die with the router (PR_SET_PDEATHSIG on
  Linux), so a killed router leaves no model holding memory.

Modules:
    manager.py     the API above; runs in the callers' tasks
    owner.py       the owner task: message loop and handlers (single writer of the table)
    actions.py     what the owner does to the table: leases, loads, evictions, idle timer
    table.py       the server table: records by id, LRU clock, counters, snapshots
    load_queue.py  queued loads and the running one; LoadJob
    policy.py      pure decisions: victims, admission while evicting, evict-all retry
    wrapped.py     WrappedServer, the owner's record of one backend
    spawner.py     the Spawner / BackendProcess seam
    process.py     ProcessSpawner: child processes, health polling, SIGTERM/SIGKILL
    tasks.py       the owner's helper tasks (process I/O, reported by message)
    recipes.py     recipe -> device, NPU backend and launch plan (engine argv)
    messages.py    typed messages to the owner
    snapshot.py    ServerState, ServerSnapshot, TableSnapshot (what readers see)
    lease.py       Lease
"""

from __future__ import annotations

from juggler.manager.lease import Lease
from juggler.manager.manager import Manager, ModelSource
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.manager.spawner import BackendProcess, Spawner

__all__ = [
    "BackendProcess",
    "Lease",
    "Manager",
    "ModelSource",
    "ServerSnapshot",
    "ServerState",
    "Spawner",
]
