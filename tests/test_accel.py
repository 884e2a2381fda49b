"""Issue 48's view of the machine's accelerators, fast: the llama.cpp library's backends
from its files, NVML through a stand-in module (the one seam), the default backend, the
backends' environment, and which backend `make install` builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from juggler.accel.detect import device_present, pick_default
from juggler.accel.library import LIB_PATH_ENV, built_backends, library_dir
from juggler.accel.nvidia import Gpu, Nvml, nvidia_present
from juggler.manager.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


class FakeNvml:
    """The few pynvml calls Juggler makes: devices, their memory, their processes."""

    def __init__(self, devices: list[tuple[int, int]], procs: list[list[tuple[int, Any]]]):
        self.devices = devices
        self.procs = procs

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return f"NVIDIA H100 #{handle}".encode()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        used, total = self.devices[handle]
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.procs[handle]]


def test_the_backends_of_a_library_are_read_from_its_files(tmp_path: Path) -> None:
    """Issue 48: "the installed backends are read from the library actually loaded"
    (llama-cpp-python's own `lib` folder, or `LLAMA_CPP_LIB_PATH`'s)."""
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    for name in ("libllama.so", "libggml.so", "libggml-cpu.so", "libggml-cuda.so"):
        (cuda / name).write_bytes(b"")
    assert built_backends(cuda) == {"cuda"}
    both = tmp_path / "both"
    both.mkdir()
    for name in ("libggml-hip.so.0", "libggml-vulkan.so", "libggml-base.so"):
        (both / name).write_bytes(b"")
    assert built_backends(both) == {"rocm", "vulkan"}
    assert built_backends(tmp_path / "missing") == frozenset()
    assert library_dir({LIB_PATH_ENV: str(cuda)}) == cuda
    packaged = library_dir({})
    assert packaged is not None and packaged.name == "lib" and packaged.parent.name == "llama_cpp"


def test_nvml_lists_each_gpu_and_what_each_process_holds() -> None:
    """Issue 48: "system-info finds NVIDIA GPUs through NVML"; per process, the figure
    nvidia-smi shows (a process NVML cannot measure is left out)."""
    fake = FakeNvml(
        [(3 * GIB, 80 * GIB), (1 * GIB, 80 * GIB)],
        [[(101, 2 * GIB), (102, None)], [(101, 1 * GIB)]],
    )
    nvml = Nvml(fake)
    assert nvml.gpus() == [
        Gpu(0, "NVIDIA H100 #0", 80 * GIB, 3 * GIB),
        Gpu(1, "NVIDIA H100 #1", 80 * GIB, 1 * GIB),
    ]
    assert nvml.gpus()[0].free_bytes == 77 * GIB
    assert nvml.process_bytes() == {101: 3 * GIB}
    with pytest.raises(RuntimeError, match="no device"):
        Nvml(FakeNvml([], []))


def test_an_nvidia_gpu_is_found_by_nvml_or_by_its_device_node(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    assert not nvidia_present(dev, nvml=None)
    assert nvidia_present(dev, nvml=Nvml(FakeNvml([(0, GIB)], [[]])))
    (dev / "nvidia0").write_bytes(b"")  # a container given the device without NVML
    assert nvidia_present(dev, nvml=None)


def test_a_backend_runs_where_the_machine_has_its_device(tmp_path: Path) -> None:
    sys_root, dev = tmp_path / "sys", tmp_path / "dev"
    (sys_root / "class/drm/card0/device").mkdir(parents=True)
    (sys_root / "class/drm/card0/device/vendor").write_text("0x1002\n")
    dev.mkdir()
    assert device_present("cpu", sys_root=sys_root, dev_root=dev)
    assert not device_present("rocm", sys_root=sys_root, dev_root=dev)  # no ROCm driver
    (dev / "kfd").write_bytes(b"")
    assert device_present("rocm", sys_root=sys_root, dev_root=dev)
    assert not device_present("vulkan", sys_root=sys_root, dev_root=dev) or nvidia_present()
    (dev / "dri").mkdir()
    (dev / "dri/renderD128").write_bytes(b"")
    assert device_present("vulkan", sys_root=sys_root, dev_root=dev)


def test_the_default_backend_follows_what_was_built_and_can_run() -> None:
    """Issue 48: "The default `llamacpp_backend` follows what was built"."""
    assert pick_default(set(), lambda b: True) == "cpu"
    assert pick_default({"cuda"}, lambda b: True) == "cuda"
    assert pick_default({"cuda"}, lambda b: False) == "cpu", "a CUDA build on a machine without"
    assert pick_default({"vulkan", "cuda"}, lambda b: True) == "cuda"


def test_backends_inherit_the_library_path() -> None:
    env = child_env({}, {"LLAMA_CPP_LIB_PATH": "/opt/llama/bin", "JUGGLER_API_KEY": "k"})
    assert env == {"LLAMA_CPP_LIB_PATH": "/opt/llama/bin"}


def _which(tmp_path: Path, tools: dict[str, str], **env: str) -> subprocess.CompletedProcess[str]:
    """`build_llama_wheel.sh --which` with only `tools` (name -> script) on PATH."""
    bin_dir = tmp_path / f"bin-{len(list(tmp_path.glob('bin-*')))}"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    script = str(ROOT / "scripts" / "build_llama_wheel.sh")
    full = {"PATH": path, "HOME": str(tmp_path), "CUDA_HOME": str(tmp_path / "no-cuda"), **env}
    return subprocess.run([script, "--which"], capture_output=True, text=True, env=full)


@pytest.mark.skipif(
    any(Path("/dev").glob("nvidia[0-9]*")), reason="this machine has an NVIDIA device node"
)
def test_make_install_builds_cuda_only_where_nvcc_and_an_nvidia_gpu_are(tmp_path: Path) -> None:
    """Issue 48: "`make install` builds llama.cpp for the machine: CUDA where `nvcc` is
    found, otherwise the CPU; a variable (`JUGGLER_LLAMA_BACKEND=cpu|cuda|vulkan|rocm|
    metal`) chooses explicitly". A CI runner with nvcc and no GPU builds for the CPU."""
    gpu = "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'"
    assert _which(tmp_path, {"nvcc": "true"}).stdout.strip() == "cpu"
    if not Path("/usr/local/cuda/bin/nvcc").exists():  # found there without PATH
        assert _which(tmp_path, {"nvidia-smi": gpu}).stdout.strip() == "cpu"
    assert _which(tmp_path, {"nvcc": "true", "nvidia-smi": gpu}).stdout.strip() == "cuda"
    failing = {"nvcc": "true", "nvidia-smi": "echo 'No devices were found'; exit 6"}
    assert _which(tmp_path, failing).stdout.strip() == "cpu"
    chosen = _which(tmp_path, {}, JUGGLER_LLAMA_BACKEND="vulkan")
    assert chosen.stdout.strip() == "vulkan"
    bad = _which(tmp_path, {}, JUGGLER_LLAMA_BACKEND="opencl")
    assert bad.returncode == 2 and "JUGGLER_LLAMA_BACKEND=opencl" in bad.stderr
    assert os.access(ROOT / "scripts" / "gpu-check.sh", os.X_OK)
