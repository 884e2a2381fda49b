"""Issue 48's offload fit and load settings, pure (GGUF headers written with `gguf`,
the GPUs given as a `GpuView`, nothing started): how many layers go to the GPU, what that
takes there and in host memory, and the 400s that name a setting that cannot work."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from juggler.errors import BadRequest
from juggler.manager.fit import estimate
from juggler.manager.footprint import kv_bytes_per_token
from juggler.manager.llamacpp import GpuView
from juggler.manager.offload import ALL_LAYERS, GPU_RUNTIME_BYTES, plan_offload, split
from juggler.manager.recipes import LaunchPlan, plan_launch
from juggler.options import EngineFlags
from juggler.registry.gguf_meta import read_info
from juggler.types import Device, ModelInfo, ModelType

from .conftest import resolve_path, settings

GIB = 1 << 30
MIB = 1 << 20
LLM = ModelType.LLM
EMBD, VOCAB, FF = 64, 256, 128


def layered(path: Path, n_layer: int = 8, *, tied: bool = False, ctx: int = 4096) -> Path:
    """A llama header with real tensors: `n_layer` blocks of the same size."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(ctx)
    w.add_block_count(n_layer)
    w.add_embedding_length(EMBD)
    w.add_feed_forward_length(FF)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.zeros((VOCAB, EMBD), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros((EMBD,), dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", np.zeros((VOCAB, EMBD), dtype=np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((EMBD, EMBD), dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.zeros((FF, EMBD), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def flags(**values: object) -> EngineFlags:
    return EngineFlags.model_validate({"workers": 1, **values})


def test_the_header_gives_each_layers_bytes_and_the_output_layers(tmp_path: Path) -> None:
    info = read_info(layered(tmp_path / "m.gguf"))
    block = (EMBD * EMBD + FF * EMBD) * 4
    assert info.layer_bytes == (block,) * 8
    assert info.output_bytes == (VOCAB * EMBD + EMBD) * 4 and not info.output_tied
    tied = read_info(layered(tmp_path / "t.gguf", tied=True))
    assert tied.output_tied and tied.output_bytes == (VOCAB * EMBD + EMBD) * 4


def test_each_layer_offloaded_moves_its_weights_and_kv_cells_to_the_gpu(tmp_path: Path) -> None:
    """llama.cpp: `n_gpu_layers` k puts the output layer and the last k - 1 repeating
    layers on the GPU, with their KV cells in every worker."""
    info = read_info(layered(tmp_path / "m.gguf"))
    fp = estimate(info, flags(ctx_size=4096, workers=2), LLM)
    none, one, half, every = (split(info, fp, k) for k in (0, 1, 5, ALL_LAYERS))
    assert (none.vram_bytes, none.host_bytes) == (0, fp.peak) and not none.is_offloaded
    assert one.num_offloaded == 1 and one.vram_bytes == (
        GPU_RUNTIME_BYTES + info.output_bytes + 2 * fp.compute
    )
    kv_layer = kv_bytes_per_token(info) * 4096 // 8  # one layer's cells, one worker
    assert half.vram_bytes - one.vram_bytes == pytest.approx(
        4 * info.layer_bytes[0] + 2 * 4 * kv_layer, rel=0.02
    )
    assert every.is_full and every.n_gpu_layers == ALL_LAYERS and every.num_layers == 9
    assert none.host_bytes > half.host_bytes > every.host_bytes


def test_automatic_offload_takes_as_many_layers_as_fit_in_the_vram(tmp_path: Path) -> None:
    """Issue 48: "an automatic default that offloads as many layers as fit in free VRAM
    with the KV cache (as Ollama estimates), leaving the rest on the CPU"."""
    info = read_info(layered(tmp_path / "m.gguf"))
    fp = estimate(info, flags(ctx_size=4096), LLM)
    four = split(info, fp, 4).vram_bytes
    assert plan_offload(info, fp, -1, four).n_gpu_layers == 4
    assert plan_offload(info, fp, -1, four + 1).n_gpu_layers == 4
    assert plan_offload(info, fp, -1, four - 1).n_gpu_layers == 3
    assert plan_offload(info, fp, -1, 80 * GIB).n_gpu_layers == ALL_LAYERS
    assert plan_offload(info, fp, -1, None).n_gpu_layers == ALL_LAYERS  # VRAM not known
    assert plan_offload(info, fp, -1, 1 * MIB).n_gpu_layers == 0
    # More KV cells (kv_cells) in the same VRAM leave room for fewer layers.
    big = estimate(info, flags(ctx_size=4096, kv_cells=65536), LLM)
    assert plan_offload(info, big, -1, four).n_gpu_layers < 4
    assert plan_offload(info, fp, 6, 1).n_gpu_layers == 6  # explicit: as asked


GPU = GpuView(frozenset({"cuda"}), frozenset({"cuda"}), None, "/opt/llama/bin")


def plan(
    path: Path, gpu: GpuView | None = GPU, memory: int = 24 * GIB, **options: object
) -> LaunchPlan:
    info = ModelInfo(name="M", checkpoint=str(path))
    opts = settings(parallel=8).model_options({"llamacpp_backend": "cuda", **options})
    return plan_launch(info, opts, settings(parallel=8), resolve_path, memory_bytes=memory, gpu=gpu)


def _refusal(
    path: Path, gpu: GpuView | None = GPU, memory: int = 24 * GIB, **options: object
) -> BadRequest:
    with pytest.raises(BadRequest) as got:
        plan(path, gpu, memory, **options)
    assert got.value.status == 400
    return got.value


def test_a_gpu_backend_the_library_lacks_or_cannot_run_is_a_400(tmp_path: Path) -> None:
    """Issue 48: "A load asking for a GPU backend the library does not have is a 400
    naming `llamacpp_backend`, not a silent CPU load." """
    path = layered(tmp_path / "m.gguf")
    lacks = _refusal(path, GpuView(library="/opt/cpu/lib"))
    assert lacks.param == "llamacpp_backend" and "built without cuda" in lacks.message
    assert "JUGGLER_LLAMA_BACKEND=cuda make install" in lacks.message
    no_device = _refusal(path, GpuView(frozenset({"cuda"}), frozenset()))
    assert no_device.param == "llamacpp_backend" and "no device" in no_device.message
    on_cpu = _refusal(path, llamacpp_backend="cpu", n_gpu_layers=3)
    assert on_cpu.param == "n_gpu_layers"
    assert plan(path, llamacpp_backend="cpu", n_gpu_layers=0).device is Device.CPU


def test_layers_fit_in_vram_or_a_400_names_n_gpu_layers(tmp_path: Path) -> None:
    path = layered(tmp_path / "m.gguf")
    info = read_info(path)
    one_worker = estimate(info, flags(ctx_size=512, parallel=8), LLM)
    three = split(info, one_worker, 3).vram_bytes
    partial = plan(path, GpuView(GPU.built, GPU.present, three))
    assert "--n-gpu-layers 3" in " ".join(partial.argv(1)) and partial.device is Device.GPU
    assert "--workers 1" in " ".join(partial.argv(1)), "partly offloaded: one worker"
    assert partial.offload is not None and partial.vram_bytes == three
    full = plan(path, GpuView(GPU.built, GPU.present, 80 * GIB))
    assert f"--n-gpu-layers {ALL_LAYERS}" in " ".join(full.argv(1))
    assert "--workers 2" in " ".join(full.argv(1)), "fully offloaded: automatic workers"
    assert plan(path, GpuView(GPU.built, GPU.present, MIB)).device is Device.CPU
    over = _refusal(path, GpuView(GPU.built, GPU.present, three), n_gpu_layers=6)
    assert over.param == "n_gpu_layers" and "GiB of GPU memory" in over.message
    assert "--n-gpu-layers 2" in " ".join(plan(path, n_gpu_layers=2).argv(1))


def test_context_and_kv_cells_are_two_settings(tmp_path: Path) -> None:
    """Issue 48: "The tokens one sequence may hold (checked against the trained context)
    and the KV cells of a worker (shared by its sequences, limited by memory) become two
    settings [...] with today's behaviour as the default"."""
    path = layered(tmp_path / "m.gguf", ctx=4096)
    too_long = _refusal(path, ctx_size=16384)
    assert too_long.param == "ctx_size" and "trained" in too_long.message
    cells = plan(path, ctx_size=4096, kv_cells=16384, llamacpp_backend="cpu")
    argv = " ".join(cells.argv(1))
    assert "--ctx-size 4096 --workers" in argv and "--kv-cells 16384" in argv
    assert cells.launch_key() != plan(path, ctx_size=4096, llamacpp_backend="cpu").launch_key()
    few = _refusal(path, ctx_size=4096, kv_cells=1024, llamacpp_backend="cpu")
    assert few.param == "kv_cells"
    huge = _refusal(path, GPU, 2 * GIB, ctx_size=4096, kv_cells=4_000_000, llamacpp_backend="cpu")
    assert huge.param == "kv_cells" and "4000000 KV cells" in huge.message


def test_the_servers_defaults_take_effect_and_a_load_overrides_them(tmp_path: Path) -> None:
    """The server-wide `kv_cells` and `n_gpu_layers` (JUGGLER_KV_CELLS,
    JUGGLER_N_GPU_LAYERS) are each load's default; a /load body's values win."""
    path = layered(tmp_path / "m.gguf")
    info = ModelInfo(name="M", checkpoint=str(path))
    server = settings(parallel=8, kv_cells=16384, n_gpu_layers=2, llamacpp_backend="cuda")

    def argv(**body: object) -> str:
        opts = server.model_options(body)
        launch = plan_launch(info, opts, server, resolve_path, memory_bytes=24 * GIB, gpu=GPU)
        return " ".join(launch.argv(1))

    default = argv()
    assert "--kv-cells 16384" in default and "--n-gpu-layers 2" in default
    given = argv(kv_cells=8192, n_gpu_layers=4)
    assert "--kv-cells 8192" in given and "--n-gpu-layers 4" in given
