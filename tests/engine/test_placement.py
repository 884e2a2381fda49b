"""Issue 48: "`device` and the offloaded layer count come from what llama.cpp reports".
llama.cpp's own log lines, as a CUDA build writes them (from the H100 run of GPU.md) and
as this machine's CPU build does, read into what was placed on which device."""

from __future__ import annotations

import pytest

from juggler.engine.llama.placement import LogTap, Recording, is_host_buffer

MIB = 1 << 20

CUDA_LOAD = """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 16 repeating layers to GPU
load_tensors: offloaded 17/17 layers to GPU
load_tensors:   CPU_Mapped model buffer size =   106.88 MiB
load_tensors:        CUDA0 model buffer size =   834.12 MiB
"""
CUDA_CONTEXT = """\
llama_context:  CUDA_Host  output buffer size =     0.19 MiB
llama_kv_cache:      CUDA0 KV buffer size =   128.00 MiB
sched_reserve:      CUDA0 compute buffer size =   117.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    12.01 MiB
"""


def test_a_cuda_load_reads_as_layers_and_bytes_per_device() -> None:
    rec = Recording()
    for piece in (CUDA_LOAD[:40], CUDA_LOAD[40:], CUDA_CONTEXT):  # lines may come in pieces
        rec.feed(piece)
    assert rec.offloaded == (17, 17)
    assert rec.by_device() == {"CUDA0": int(834.12 * MIB) + 128 * MIB + 117 * MIB}
    assert rec.device_bytes(("KV", "compute")) == 245 * MIB
    assert rec.host_bytes() == int(106.88 * MIB) + int(0.19 * MIB) + int(12.01 * MIB)


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("CPU", True),
        ("CPU_Mapped", True),
        ("CPU_REPACK", True),
        ("CUDA_Host", True),
        ("Vulkan_Host", True),
        ("CUDA0", False),
        ("Vulkan0", False),
        ("ROCm1", False),
        ("MTL0", False),
    ],
)
def test_host_buffers_are_told_from_device_buffers(name: str, host: bool) -> None:
    assert is_host_buffer(name) is host


def test_the_tap_records_per_thread_and_prints_only_errors_unless_verbose(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tap = LogTap()
    tap.on_text(1, "load_tensors: offloaded 3/31 layers to GPU\n")  # nobody recording
    with tap.record() as rec:
        tap.on_text(1, "llama_kv_cache:        CPU KV buffer size =    90.00 MiB\n")
        tap.on_text(3, "llama_model_load: error loading model\n")
    assert rec.buffers == [("CPU", "KV", 90 * MIB)] and rec.offloaded is None
    assert capsys.readouterr().err == "llama_model_load: error loading model\n"
