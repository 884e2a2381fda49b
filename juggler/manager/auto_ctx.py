"""Lemonade's `ctx_size: -1`: the context size chosen when the model is loaded.

lemonade.md: "A `ctx_size` of `-1` means the server picks the context size
automatically", and `resolved_ctx_size` is "the effective `ctx_size`, or the
automatically computed size when that is `-1`". Lemonade takes the model's context window
capped by the memory its KV cache can have after the weights. Juggler's rule, from the
GGUF header and `fit`'s estimate (weights plus every worker's KV cache, at the load's
cache types):

- the context the model was trained for (`<arch>.context_length`), at most
  `AUTO_CTX_MAX` (32768, Lemonade's cap for a model whose window it does not know,
  which is also the size when the header does not say);
- for a CPU load, at most what lets the weights and the KV cache of every worker take
  `AUTO_MEMORY_SHARE` (half) of the memory the load can have (what is available now
  plus what Juggler's backends hold, as `fit.check_fit` counts it): the rest stays for
  other models, compute and output buffers and the machine; rounded down to a multiple of
  `AUTO_CTX_STEP`, and never below `AUTO_CTX_MIN` (a load that cannot fit even that is
  refused by `fit.check_fit`, as any other). An offloaded load's memory is not known
  here, so only the first rule applies to it;
- without a header to read (a file that is not GGUF, a recipe without one):
  `AUTO_CTX_FALLBACK` (4096, Lemonade's fallback and Juggler's default `ctx_size`).

The resolved size is what the backend is started with and what health shows; the load
stays automatic (`LaunchPlan.ctx_auto`), so asking for `-1` again is the same load.
Pure, except `header_of`, which reads the file's header.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from juggler.compute.cpus import allowed_cpus
from juggler.compute.workers import workers_for
from juggler.config import Settings
from juggler.engine_args import parse_llamacpp_args
from juggler.errors import JugglerError
from juggler.manager.fit import available_memory_bytes
from juggler.manager.footprint import F16, KvTypes, kv_bytes_per_token
from juggler.options import AUTO_CTX, MIN_CTX, ModelOptions
from juggler.registry.gguf_meta import GgufError, GgufInfo, read_info
from juggler.types import ModelInfo

AUTO_CTX_MAX = 32768
AUTO_CTX_MIN = 512
AUTO_CTX_STEP = 256
AUTO_CTX_FALLBACK = 4096
AUTO_MEMORY_SHARE = 0.5


def header_of(path: Path | str | None) -> GgufInfo | None:
    """The GGUF header of `path`, or None (no path, no file, not GGUF)."""
    if not path:
        return None
    try:
        return read_info(Path(path))
    except (GgufError, OSError):
        return None


def auto_ctx_size(
    header: GgufInfo | None, *, workers: int, memory_bytes: int | None, kv_types: KvTypes = F16
) -> int:
    """The automatic context size (see the module doc). `memory_bytes` None: the load
    does not run from host memory (offloaded), or the memory is not known."""
    if header is None:
        return AUTO_CTX_FALLBACK
    cap = max(min(header.context_length or AUTO_CTX_MAX, AUTO_CTX_MAX), MIN_CTX)
    per_token = kv_bytes_per_token(header, kv_types)
    if memory_bytes is None or not per_token:
        return cap
    budget = int(memory_bytes * AUTO_MEMORY_SHARE) - header.size_bytes
    fits = budget // (max(workers, 1) * per_token) if budget > 0 else 0
    return min(cap, max(fits // AUTO_CTX_STEP * AUTO_CTX_STEP, AUTO_CTX_MIN))


def requested_workers(options: ModelOptions, settings: Settings) -> int:
    """The workers a load asks for: its `--workers`, else the setting (0: automatic)."""
    return int(parse_llamacpp_args(options.llamacpp_args).get("workers", settings.workers))


def workers_of(options: ModelOptions, settings: Settings, header: GgufInfo | None) -> int:
    """Engine workers of a llama.cpp load of a text model, automatic ones (0) resolved as
    the backend will (`compute.workers`)."""
    return workers_for(
        requested_workers(options, settings),
        header.size_bytes if header is not None else None,
        is_llm=True,
        offloaded=options.llamacpp_backend != "cpu",
        cores=len(allowed_cpus()),
    )


def resolved(
    options: ModelOptions,
    header: GgufInfo | None,
    settings: Settings,
    *,
    memory_bytes: int | None,
) -> ModelOptions:
    """`options` with an automatic `ctx_size` replaced by the size chosen now (the same
    options when the size is given)."""
    if options.ctx_size != AUTO_CTX:
        return options
    workers = workers_of(options, settings, header)
    kv_types = (options.cache_type_k, options.cache_type_v)
    size = auto_ctx_size(header, workers=workers, memory_bytes=memory_bytes, kv_types=kv_types)
    return options.model_copy(update={"ctx_size": size})


def listed_size(
    options: ModelOptions,
    header: GgufInfo | None,
    trained: int | None,
    settings: Settings,
    *,
    memory_bytes: int | None = None,
) -> int:
    """The `context_length` a model list shows for a model that is not loaded (issue 49,
    Lemonade's test 006c: "ctx_size=-1 means 'size automatically' and must never be
    returned"): a given size as it is; an automatic one as a load now would choose it
    from the file's header (`memory_bytes` None: what is available now, for a CPU load);
    before the file is on disk (no header to size from), the context the catalog says
    the model was trained for, as Lemonade shows it, else `AUTO_CTX_FALLBACK`."""
    if options.ctx_size != AUTO_CTX:
        return options.ctx_size
    if header is None:
        return trained if trained and trained > 0 else AUTO_CTX_FALLBACK
    memory = None
    if options.llamacpp_backend == "cpu":
        memory = memory_bytes if memory_bytes is not None else available_memory_bytes()
    return resolved(options, header, settings, memory_bytes=memory).ctx_size


def planned_size(
    info: ModelInfo,
    options: ModelOptions,
    settings: Settings,
    resolve: Callable[[ModelInfo], Path],
    *,
    memory_bytes: int | None = None,
) -> int:
    """The `ctx_size` a load of `info` with `options` would start with now, as
    `recipes.plan_launch` sizes it (`memory_bytes` None: what is available now), without its checks:
    a checkpoint not on disk yet has no header to read."""
    if options.ctx_size != AUTO_CTX:
        return options.ctx_size
    try:
        path: Path | None = resolve(info) if info.checkpoint else None
    except (JugglerError, OSError, ValueError):
        path = None
    memory = None
    if info.recipe == "llamacpp" and options.llamacpp_backend == "cpu":
        memory = memory_bytes if memory_bytes is not None else available_memory_bytes()
    return resolved(options, header_of(path), settings, memory_bytes=memory).ctx_size
