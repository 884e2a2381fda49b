"""Will a llama.cpp load fit? Answered from the GGUF header before any process starts.

Issue 27: "a load that cannot fit is refused before a process starts" (a load with
`ctx_size: 131072` gave no answer in 150 s and no backend). Two rules, both a 400 naming
`ctx_size`:

- An LLM's context may not exceed the context it was trained for (`<arch>.context_length`
  in its header). llama.cpp only warns, and past it the output degrades into noise;
  Ollama silently clamps, which would accept a setting and ignore it.
- A CPU load's estimate must fit in the machine's memory (the smaller of MemTotal and
  the cgroup limit, so a container's limit counts): the weights (the file) plus the KV
  cache, `workers x ctx_size x` the bytes one token takes in every layer (keys and
  values of the load's `cache_type_k` / `cache_type_v`, f16 by default: a q8_0 cell
  takes about half, issue 49). It is an upper bound for sliding-window models and leaves out compute buffers,
  so it refuses only what can never fit, however much is evicted first. What might fit
  after evicting others is the memory manager's business, not this check's.

A quantized cache type whose blocks do not divide the model's head size is a 400 naming
it (llama.cpp cannot make such a context).

Pure functions, except `host_memory_bytes`, which reads /proc and /sys.
"""

from __future__ import annotations

from pathlib import Path

from juggler.errors import BadRequest
from juggler.kv_cache import DEFAULT_KV_TYPE, fits_head, row_bytes
from juggler.registry.gguf_meta import GgufInfo

#: The element types of keys and values (llama.cpp's default: f16 both).
KvTypes = tuple[str, str]
F16: KvTypes = (DEFAULT_KV_TYPE, DEFAULT_KV_TYPE)
GIB = 1 << 30


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def head_sizes(info: GgufInfo) -> tuple[int, int] | None:
    """The sizes of a key head and a value head, None when the header does not say."""
    m, arch = info.metadata, info.architecture
    heads = _int(m.get(f"{arch}.attention.head_count"))
    embd = _int(m.get(f"{arch}.embedding_length"))
    if heads is None or embd is None:
        return None
    k_len = _int(m.get(f"{arch}.attention.key_length")) or embd // heads
    return k_len, _int(m.get(f"{arch}.attention.value_length")) or k_len


def kv_bytes_per_token(info: GgufInfo, kv_types: KvTypes = F16) -> int | None:
    """Bytes of keys and values one token takes across every layer, at the element
    types `kv_types` (keys, values); None when the header does not say (a recurrent
    model, or an architecture without these keys)."""
    m, arch = info.metadata, info.architecture
    layers = _int(m.get(f"{arch}.block_count"))
    heads = _int(m.get(f"{arch}.attention.head_count"))
    sizes = head_sizes(info)
    if layers is None or heads is None or sizes is None:
        return None
    k_len, v_len = sizes
    kv_heads = m.get(f"{arch}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per layer (some hybrid architectures)
        per_layer = [int(h) for h in kv_heads if isinstance(h, int)]
    elif isinstance(kv_heads, int):
        per_layer = [kv_heads] * layers
    else:
        return None
    type_k, type_v = kv_types
    total = sum(row_bytes(type_k, h * k_len) + row_bytes(type_v, h * v_len) for h in per_layer)
    return total or None


def estimate_bytes(info: GgufInfo, ctx_size: int, workers: int, kv_types: KvTypes = F16) -> int:
    """Weights plus every worker's KV cache at `ctx_size` (see the module doc)."""
    per_token = kv_bytes_per_token(info, kv_types) or 0
    return info.size_bytes + workers * ctx_size * per_token


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


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def check_fit(
    info: GgufInfo,
    *,
    ctx_size: int,
    workers: int,
    is_llm: bool,
    memory_bytes: int | None,
    kv_types: KvTypes = F16,
) -> None:
    """BadRequest (param ctx_size, or a cache type) when the load cannot work; see the
    module doc. `memory_bytes` None: the load does not run from host memory (offloaded
    to a GPU)."""
    check_kv_types(info, kv_types)
    trained = info.context_length
    if is_llm and trained is not None and ctx_size > trained:
        raise BadRequest(
            f"ctx_size {ctx_size} is more than the {trained} tokens this model was trained "
            f"for; use at most {trained}",
            param="ctx_size",
        )
    if memory_bytes is None:
        return
    need = estimate_bytes(info, ctx_size, workers, kv_types)
    if need > memory_bytes:
        kv = need - info.size_bytes
        raise BadRequest(
            f"ctx_size {ctx_size} cannot fit: the weights ({_gib(info.size_bytes)}) and the "
            f"KV cache of {workers} worker(s) ({_gib(kv)}) need about {_gib(need)}, and this "
            f"machine has {_gib(memory_bytes)}; use a smaller ctx_size, fewer workers or a "
            "smaller cache_type_k / cache_type_v",
            param="ctx_size",
        )


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def host_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The memory this process may use at most: MemTotal, or the cgroup limit (v2
    `memory.max`, v1 `memory/memory.limit_in_bytes`) when that is smaller."""
    total: int | None = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    for limit_file in (cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"):
        limit = _read_int(limit_file)  # "max" (no limit) is not a number
        if limit is not None and total is not None and limit < total:
            total = limit
    return total
