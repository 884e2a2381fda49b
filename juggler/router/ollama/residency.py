"""The load options and keep_alive an Ollama request asks for (`OllamaRequestOptions`,
read once by `request`), applied through the manager.

`ensure_options(state, model, wanted)`: the model becomes resident with its current
options (or, when not loaded, its saved ones) updated by `wanted`. Options that do not
change how the backend starts (idle timeouts, auto_evict) are updated in place; a new
context size or backend reloads it, as an explicit /load with those options would.
Runs on the router's event loop.

Ollama's `num_ctx` on a text model (issue 48): Ollama's FAQ, "Required RAM will scale by
OLLAMA_NUM_PARALLEL * OLLAMA_CONTEXT_LENGTH": each of a model's parallel requests may hold
`num_ctx` tokens. So `num_ctx` N is `ctx_size` N (what one sequence may hold) with
`kv_cells` N x the sequences of a worker (`parallel`). Where those cells do not fit in
memory, the load falls back to `kv_cells` 0 (the worker's sequences share N cells), as
Ollama falls back to one request at a time when its parallel load does not fit.
Lemonade's `ctx_size` on /api/v1/load keeps its meaning (llama-server's `-c` with
`-kvu`: the cells of a worker, and what one sequence may hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from juggler.engine_args import parse_llamacpp_args
from juggler.errors import BadRequest
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.options import MAX_KV_CELLS
from juggler.router.core.deps import RouterState
from juggler.router.ollama.options import OllamaRequestOptions, merge_engine_args
from juggler.types import ModelType


def current_options(state: RouterState, model: str) -> dict[str, Any]:
    """The options `model` runs with now; its saved options when it is not loaded."""
    for snap in state.manager.snapshot():
        if snap.model_name == model and snap.status is ServerState.READY:
            return snap.options.model_dump()
    return state.pins.saved_options(model)


async def ensure_options(
    state: RouterState, model: str, wanted: Mapping[str, Any]
) -> ServerSnapshot | None:
    """Load `model` with `wanted` over its current options (nothing when `wanted` is
    empty). Raises what `Manager.load` raises (BadRequest for a bad option, ...)."""
    if not wanted:
        return None
    options = current_options(state, model)
    extra = dict(wanted)
    if "llamacpp_args" in extra:
        base = options.get("llamacpp_args") or state.manager.settings.llamacpp_args
        extra["llamacpp_args"] = merge_engine_args(base, extra["llamacpp_args"])
    options.update(extra)
    num_ctx = wanted.get("ctx_size")
    is_llm = state.registry.lookup(model).type is ModelType.LLM
    if isinstance(num_ctx, int) and is_llm:  # Ollama's num_ctx (the module doc)
        settings = state.manager.settings
        args = options.get("llamacpp_args") or settings.llamacpp_args
        per_worker = parse_llamacpp_args(args).get("parallel") or settings.parallel
        options["kv_cells"] = ollama_kv_cells(num_ctx, per_worker)
    try:
        try:
            return await state.manager.load(model, options)
        except BadRequest as exc:
            if exc.param != "kv_cells" or not options.get("kv_cells") or num_ctx is None:
                raise
            return await state.manager.load(model, {**options, "kv_cells": 0})
    except BadRequest as exc:
        if exc.param == "n_gpu_layers" and "n_gpu_layers" in wanted:  # Ollama's num_gpu
            raise BadRequest(f"options.num_gpu: {exc.message}", param="options.num_gpu") from None
        raise


def ollama_kv_cells(num_ctx: int, parallel: int) -> int:
    """The KV cells of a worker for Ollama's `num_ctx` (the module doc): `num_ctx` for
    each of its `parallel` sequences; 0 (as ctx_size) for one sequence or automatic
    sizing."""
    if num_ctx <= 0 or parallel <= 1:
        return 0
    return min(num_ctx * parallel, MAX_KV_CELLS)


async def unload_if_loaded(state: RouterState, model: str) -> bool:
    """keep_alive 0 on a load-only request: unload now (when loaded)."""
    if any(s.model_name == model for s in state.manager.snapshot()):
        await state.manager.unload(model)
        return True
    return False


async def keep_alive_after(state: RouterState, model: str, options: OllamaRequestOptions) -> None:
    """After a request: its model's idle timeout (its keep_alive, when it gave one). Only
    a model that is still loaded is touched; one that is gone stays gone."""
    if any(
        s.model_name == model and s.status is ServerState.READY for s in state.manager.snapshot()
    ):
        await ensure_options(state, model, options.residency())
