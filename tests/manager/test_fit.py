"""Issue 27: "a load that cannot fit is refused before a process starts" (a load with
`ctx_size: 131072` gave no answer in 150 s and no backend). Fast: GGUF headers written
by the `gguf` package, memory given, nothing started."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from juggler.errors import BadRequest
from juggler.manager.fit import check_fit, host_memory_bytes, kv_bytes_per_token
from juggler.manager.recipes import plan_launch
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelInfo

from .conftest import resolve_path, settings

GIB = 1 << 30


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


def test_kv_bytes_per_token_follow_the_header(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf"))
    # 30 layers x 3 KV heads x (64 + 64) values x 2 bytes (f16): llama.cpp's own figure
    # for SmolLM2 is 23,040 bytes a token (the 90 MiB KV cache of a 4096 context).
    assert kv_bytes_per_token(info) == 30 * 3 * 128 * 2 == 23040


def test_a_context_past_the_trained_one_is_refused_naming_ctx_size(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf"))
    check_fit(info, ctx_size=8192, workers=1, is_llm=True, memory_bytes=24 * GIB)
    with pytest.raises(BadRequest, match="trained") as got:
        check_fit(info, ctx_size=131072, workers=1, is_llm=True, memory_bytes=24 * GIB)
    assert got.value.param == "ctx_size"
    # An embedding model's context is clamped by the engine to what it was trained for.
    check_fit(info, ctx_size=131072, workers=1, is_llm=False, memory_bytes=24 * GIB)


def test_a_load_bigger_than_memory_is_refused_and_one_that_fits_is_not(tmp_path: Path) -> None:
    info = read_info(smol_like(tmp_path / "m.gguf", ctx=1 << 20))
    # 8 workers x 131072 tokens x 23,040 bytes = 22.5 GiB of KV cache.
    with pytest.raises(BadRequest, match="cannot fit") as got:
        check_fit(info, ctx_size=131072, workers=8, is_llm=True, memory_bytes=16 * GIB)
    assert got.value.param == "ctx_size" and "16.0 GiB" in str(got.value)
    check_fit(info, ctx_size=131072, workers=1, is_llm=True, memory_bytes=16 * GIB)
    # Offloaded to a GPU: host memory is not the limit.
    check_fit(info, ctx_size=131072, workers=8, is_llm=True, memory_bytes=None)


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
    assert plan_launch(info, gpu, settings(), resolve_path, memory_bytes=4 * GIB)


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
