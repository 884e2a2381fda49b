"""Will a llama.cpp load fit? Answered from the GGUF header before any process starts.

Issue 27: "a load that cannot fit is refused before a process starts" (a load with
`ctx_size: 131072` gave no answer in 150 s and no backend). Issue 52: the estimate
undercounted (a load of 64 workers x 256 sequences used 15.3 GB where 12.1 GB were
estimated), the check read the machine's total memory, and values that cannot be right
for the machine were accepted. Each rule is a 400 naming the value:

- An LLM's context may not exceed the context it was trained for (`<arch>.context_length`
  in its header): `ctx_size`. llama.cpp only warns, and past it the output degrades into
  noise; Ollama silently clamps, which would accept a setting and ignore it.
- `threads` and `threads_batch` may not exceed the cores this process may run on: more
  threads than cores only slow every decode down (they wait for each other).
- Everything llama.cpp allocates for the load (`footprint`: the weights, and every
  worker's KV cache, compute buffer and output buffer, at their peak) must fit in the
  memory the load can have: what is available now (`MemAvailable`, or what the cgroup
  limit leaves) plus what Juggler's own backends hold, which evicting them would free
  (the manager adds that). So it refuses only what cannot fit however much of Juggler is
  evicted first; what fits after evicting others is the memory manager's business. The
  value named is `workers` when one worker would fit, else the largest part's own
  (`ctx_size` for the KV cache, `parallel` or `batch_size` for the buffers).
  A GPU load's offloaded layers, their KV cells and the compute buffers go to the GPU
  (`offload`, issue 48); what stays in host memory is what is checked here.
- The context and the KV cells are apart (issue 48): `ctx_size` is what one sequence may
  hold, `kv_cells` (`EngineFlags.n_cells`) the cells a worker's context allocates.

Pure functions, except `host_memory_bytes` and `available_memory_bytes`, which read
/proc and /sys.
"""

from __future__ import annotations

from pathlib import Path

from juggler.errors import BadRequest
from juggler.kv_cache import fits_head
from juggler.manager.footprint import Footprint, KvTypes, context_shape, footprint, head_sizes
from juggler.manager.offload import Offload
from juggler.options import EngineFlags
from juggler.registry.gguf_meta import GgufInfo
from juggler.types import ModelType

GIB = 1 << 30
MIB = 1 << 20


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _mib(n: int) -> str:
    return f"{n / MIB:.0f} MiB"


def estimate(info: GgufInfo, flags: EngineFlags, model_type: ModelType) -> Footprint:
    """What a backend with these engine flags allocates (`footprint`); automatic workers
    (0) are resolved first (`recipes`), so a count is known here."""
    if flags.workers < 1:
        raise ValueError("estimate: resolve automatic workers (0) first")
    shape = context_shape(
        info,
        model_type,
        ctx_size=flags.n_cells,
        parallel=flags.parallel,
        batch_size=flags.batch_size,
        flash_attn=flags.flash_attn,
        kv_types=(flags.cache_type_k, flags.cache_type_v),
    )
    return footprint(info, shape, flags.workers)


def check_threads(flags: EngineFlags, cores: int) -> None:
    """BadRequest naming `threads` or `threads_batch` when it exceeds `cores`."""
    for name in ("threads", "threads_batch"):
        value = getattr(flags, name)
        if value is not None and value > cores:
            raise BadRequest(
                f"{name} {value} is more than the {cores} cores this machine lets Juggler "
                f"use; use at most {cores} (0 for threads: every core)",
                param=name,
            )


def check_kv_types(info: GgufInfo, kv_types: KvTypes) -> None:
    """BadRequest naming `cache_type_k` / `cache_type_v` when the model's heads do not
    split into whole blocks of the type (llama.cpp would refuse the context)."""
    sizes = head_sizes(info)
    if sizes is None:
        return
    for name, kind, size in zip(("cache_type_k", "cache_type_v"), kv_types, sizes, strict=True):
        if not fits_head(kind, size):
            raise BadRequest(
                f"{name} {kind!r} cannot hold this model's heads of {size} values (its "
                "blocks do not divide them); use f16, bf16 or f32",
                param=name,
            )


def check_fit(
    info: GgufInfo,
    flags: EngineFlags,
    model_type: ModelType,
    *,
    memory_bytes: int | None,
    offload: Offload | None = None,
) -> None:
    """BadRequest when the load cannot work; see the module doc. `memory_bytes`: the
    host memory the load can have (None: unknown, not checked); `offload`: where its
    layers go (`offload.split` of this footprint), so only its host part counts."""
    check_kv_types(info, (flags.cache_type_k, flags.cache_type_v))
    trained = info.context_length
    if model_type is ModelType.LLM and trained is not None and flags.ctx_size > trained:
        raise BadRequest(
            f"ctx_size {flags.ctx_size} is more than the {trained} tokens this model was "
            f"trained for; use at most {trained}",
            param="ctx_size",
        )
    if memory_bytes is None:
        return
    fp = estimate(info, flags, model_type)
    on_gpu = offload is not None and offload.is_offloaded
    need, one = (
        (offload.host_bytes, offload.host_bytes - (fp.workers - 1) * offload.host_per_worker)
        if offload is not None and on_gpu
        else (fp.peak, fp.process + fp.weights + fp.per_worker)
    )
    if need <= memory_bytes:
        return
    param = "workers" if flags.workers > 1 and one <= memory_bytes else _largest(fp, flags)
    parts = (
        f"what stays in host memory while {offload.num_offloaded} of {offload.num_layers} "
        f"layers are on the GPU: {_mib(offload.host_per_worker)} a worker"
        if offload is not None and on_gpu
        else f"weights {_gib(fp.weights)}, and a worker's KV cache {_mib(fp.kv)}, "
        f"compute buffer {_mib(fp.compute)} and output buffers {_mib(fp.output_max)}"
    )
    raise BadRequest(
        f"{param}: ctx_size {flags.ctx_size} ({flags.n_cells} KV cells) with {flags.workers} worker(s) x "
        f"{flags.parallel} sequences cannot fit: llama.cpp needs about {_gib(need)} ({parts}), "
        f"and {_gib(memory_bytes)} is available to this load even after evicting every "
        "other model; use fewer workers, fewer sequences (parallel), a smaller ctx_size or a "
        "smaller cache_type_k / cache_type_v",
        param=param,
    )


def _largest(fp: Footprint, flags: EngineFlags) -> str:
    """The setting behind the largest part of a worker's footprint."""
    if fp.kv >= max(fp.compute, fp.output_max):
        return "kv_cells" if flags.kv_cells else "ctx_size"
    return "parallel" if flags.parallel >= flags.batch_size else "batch_size"


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(meminfo: Path, key: str) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The memory this process may use at most: MemTotal, or the cgroup limit (v2
    `memory.max`, v1 `memory/memory.limit_in_bytes`) when that is smaller."""
    total = _meminfo(meminfo, "MemTotal")
    for limit_file in (cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"):
        limit = _read_int(limit_file)  # "max" (no limit) is not a number
        if limit is not None and total is not None and limit < total:
            total = limit
    return total


def available_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The memory a new process could take now: MemAvailable, or what the cgroup limit
    leaves (v2 `memory.max - memory.current`, v1 `limit_in_bytes - usage_in_bytes`) when
    that is smaller."""
    available = _meminfo(meminfo, "MemAvailable")
    for limit_file, usage_file in (
        (cgroup / "memory.max", cgroup / "memory.current"),
        (cgroup / "memory" / "memory.limit_in_bytes", cgroup / "memory" / "memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and available is not None:
            available = min(available, max(0, limit - usage))
    return available
