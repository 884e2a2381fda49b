#!/usr/bin/env bash
# Build the pinned llama-cpp-python from source for this machine's accelerator, once, into
# Juggler's wheel cache, and print that folder (for `pip install --find-links`).
#
#     scripts/build_llama_wheel.sh PYTHON     build (or reuse) the wheel; print its folder
#     scripts/build_llama_wheel.sh --which    print the backend that would be built
#
# Which llama.cpp backend (issue 48): JUGGLER_LLAMA_BACKEND=cpu|cuda|vulkan|rocm|metal
# chooses; unset (or `auto`), it is cuda where `nvcc` is found AND the machine has an
# NVIDIA GPU (`nvidia-smi -L` lists one, or the driver made /dev/nvidia0), else cpu. A
# machine with the CUDA compiler but no GPU (a CI runner) builds for the CPU: compiling
# the CUDA kernels takes most of an hour on two cores, for a library it could not use.
# Each backend's wheel has its own folder (pip's wheel cache does not key on CMAKE_ARGS),
# and the CPU build's folder is the one it always had.
#
# Why not plain `pip install`: llama.cpp's default native CPU build turns on AMX where the
# CPU lists it, and on some VMs (these among them) the `ldtilecfg` instruction then faults
# on the first decode. We keep -march=native but switch AMX off (x86-64 only).
set -euo pipefail
version=0.3.36

find_nvcc() {
  command -v nvcc 2>/dev/null && return 0
  for candidate in "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

has_nvidia_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    return 0
  fi
  compgen -G "/dev/nvidia[0-9]*" >/dev/null
}

backend=${JUGGLER_LLAMA_BACKEND:-auto}
if [ "$backend" = auto ]; then
  if find_nvcc >/dev/null && has_nvidia_gpu; then backend=cuda; else backend=cpu; fi
fi
case "$backend" in
  cpu|cuda|vulkan|rocm|metal) ;;
  *) echo "JUGGLER_LLAMA_BACKEND=$backend: use cpu, cuda, vulkan, rocm or metal" >&2; exit 2 ;;
esac
if [ "${1:-}" = --which ]; then
  echo "$backend"
  exit 0
fi
python=${1:?usage: build_llama_wheel.sh PYTHON | --which}

flags=""
if [ "$(uname -m)" = x86_64 ]; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
cmake_args="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags'"
tag=native-noamx
case "$backend" in
  cuda)
    nvcc=$(find_nvcc) || { echo "JUGGLER_LLAMA_BACKEND=cuda: nvcc not found" >&2; exit 2; }
    export CUDACXX="$nvcc"
    # `native`: the GPUs of this machine (all of them where nvcc cannot see one).
    arch=${CMAKE_CUDA_ARCHITECTURES:-$(has_nvidia_gpu && echo native || echo all-major)}
    cmake_args="$cmake_args -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch"
    tag=cuda-$arch-native-noamx ;;
  vulkan) cmake_args="$cmake_args -DGGML_VULKAN=ON"; tag=vulkan-native-noamx ;;
  rocm)
    if command -v hipconfig >/dev/null 2>&1; then
      export HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)"
    fi
    cmake_args="$cmake_args -DGGML_HIP=ON"; tag=rocm-native-noamx ;;
  metal) cmake_args="-DGGML_METAL=ON"; tag=metal ;;
esac

dir="${JUGGLER_WHEEL_CACHE:-$HOME/.cache/juggler/wheels}/llama-cpp-python-$version-$tag"
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version for $backend from source" \
    "(about 8 minutes on 2 cores for the CPU; CUDA about 5 minutes on 16)..." >&2
  tmp=$(mktemp -d)
  CMAKE_ARGS="$cmake_args" \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
      -w "$tmp" "llama-cpp-python==$version" >&2
  mkdir -p "$dir"
  mv "$tmp"/llama_cpp_python-*.whl "$dir"/
  rm -rf "$tmp"
fi
echo "$dir"
