"""How many layers a GPU load offloads, and what that puts on the GPU and in host memory.
Pure.

Issue 48: "`n_gpu_layers` as a model option (Ollama's `num_gpu`, llama-server's `-ngl`),
and an automatic default that offloads as many layers as fit in free VRAM with the KV
cache (as Ollama estimates), leaving the rest on the CPU."

llama.cpp's placement (`llama_model::load_tensors`): of a model's `n_layer + 1` layers,
`n_gpu_layers = k` puts the output layer and the last `k - 1` repeating layers on the GPU;
the token embeddings stay in host memory (a model whose output is its embeddings gets a
copy of them on the GPU). Each offloaded layer's KV cells go with it (`offload_kqv`), in
every worker's context; each worker's compute buffer is on the GPU as soon as anything is;
and the GPU runtime of the process (the CUDA context, its kernels and cuBLAS' workspace)
takes about `GPU_RUNTIME_BYTES` more. Weights of layers on the CPU, their KV cells, the
output buffers and the process itself are host memory; a layer on the GPU is not (its
mapped pages are released once copied).

The estimate is the footprint's (`footprint`: weights, KV, compute and output buffers),
split by layer from the GGUF header's tensor sizes (`GgufInfo.layer_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from juggler.manager.footprint import CONTEXT_BYTES, Footprint
from juggler.registry.gguf_meta import GgufInfo

MIB = 1 << 20
#: What a process's GPU runtime holds besides llama.cpp's buffers: nvidia-smi showed a
#: backend at 1,582 MiB on an H100 (CUDA 13) where llama.cpp's own buffers of that load
#: (weights 834 MiB, KV 128 MiB, compute 117 MiB) come to about 1,080 MiB.
GPU_RUNTIME_BYTES = 512 * MIB
#: `n_gpu_layers` that means "every layer" (llama-server's `-ngl 999`).
ALL_LAYERS = 999


@dataclass(frozen=True)
class Offload:
    """Where one load's layers and buffers go."""

    #: What llama.cpp is given (0: nothing offloaded).
    n_gpu_layers: int
    #: The model's layers as llama.cpp counts them (repeating layers + the output layer).
    num_layers: int
    #: Estimated bytes on the GPU (0 when nothing is offloaded).
    vram_bytes: int
    #: Estimated host memory at its peak (the fit check's figure).
    host_bytes: int
    #: Host memory of one more worker (for the refusal's `workers` name).
    host_per_worker: int
    #: GPU memory of one worker's KV cells and compute buffer.
    vram_per_worker: int

    @property
    def num_offloaded(self) -> int:
        return min(self.n_gpu_layers, self.num_layers)

    @property
    def is_full(self) -> bool:
        return self.num_offloaded >= self.num_layers

    @property
    def is_offloaded(self) -> bool:
        return self.n_gpu_layers > 0


def num_layers(info: GgufInfo) -> int:
    """Repeating layers plus the output layer (0 when the header does not say)."""
    blocks = info.metadata.get(f"{info.architecture}.block_count")
    n = blocks if isinstance(blocks, int) and blocks > 0 else len(info.layer_bytes)
    return n + 1 if n else 0


def _layer_weights(info: GgufInfo, n_layer: int) -> list[int]:
    """Bytes of each repeating layer; an even split of the rest where the header has no
    tensor sizes."""
    if len(info.layer_bytes) == n_layer:
        return list(info.layer_bytes)
    rest = max(0, info.size_bytes - info.output_bytes)
    return [rest // max(n_layer, 1)] * n_layer


def split(info: GgufInfo, fp: Footprint, n_gpu_layers: int) -> Offload:
    """The placement of `fp` (a footprint of `fp.workers` workers) with `n_gpu_layers`."""
    total = num_layers(info)
    k = max(0, min(n_gpu_layers, total))
    n_layer = max(total - 1, 0)
    repeating = max(0, k - 1)
    weights = _layer_weights(info, n_layer)
    on_gpu = sum(weights[n_layer - repeating :]) if repeating else 0
    head = info.output_bytes if k > 0 else 0
    host_weights = fp.weights - on_gpu - (0 if info.output_tied else head)
    kv_cells = max(0, fp.kv - CONTEXT_BYTES)
    kv_gpu = kv_cells * repeating // n_layer if n_layer else 0
    kv_host = fp.kv - kv_gpu
    if k == 0:
        return Offload(
            0,
            total,
            0,
            fp.peak,
            fp.per_worker,
            0,
        )
    # A partly offloaded model runs its CPU layers in a host compute buffer as well.
    host_compute = fp.compute if k < total else 0
    per_worker_host = kv_host + fp.output_max + host_compute
    per_worker_gpu = kv_gpu + fp.compute
    return Offload(
        n_gpu_layers,
        total,
        GPU_RUNTIME_BYTES + on_gpu + head + fp.workers * per_worker_gpu,
        fp.process + max(0, host_weights) + fp.workers * per_worker_host,
        per_worker_host,
        per_worker_gpu,
    )


def plan_offload(info: GgufInfo, fp: Footprint, requested: int, vram_bytes: int | None) -> Offload:
    """The placement for `requested` layers (-1: automatic). Automatic offloads every
    layer when the VRAM is not known (`vram_bytes` None), else the most layers whose
    estimate fits in `vram_bytes` (0 when not even the output layer does)."""
    total = num_layers(info)
    if requested >= 0:
        return split(info, fp, requested)
    if vram_bytes is None or total == 0:
        return split(info, fp, ALL_LAYERS)
    best = split(info, fp, 0)
    for k in range(1, total + 1):
        candidate = split(info, fp, k)
        if candidate.vram_bytes > vram_bytes:
            break
        best = candidate
    return split(info, fp, ALL_LAYERS) if best.is_full else best
