#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` and `llama-batched-bench` from the llama.cpp tree
# inside the llama-cpp-python==0.3.36 sdist (the same llama.cpp the engine links), for the
# comparisons in bench/bench_engine.py. Sources go to bench/_src, binaries to
# bench/_build/bin; both are gitignored and never committed.
#
# AMX is switched off: these VMs report amx_tile in /proc/cpuinfo but fault on
# `ldtilecfg`, so a -march=native build that uses AMX crashes in ggml-cpu.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-$here/../.venv/bin/python}"
version="0.3.36"
src="$here/_src"
build="$here/_build"
mkdir -p "$src" "$build"
sdist="$src/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  "$py" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$src"
fi
tree="$src/llama_cpp_python-$version"
if [ ! -d "$tree" ]; then
  tar -xzf "$sdist" -C "$src"
fi
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$tree/vendor/llama.cpp" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx"
cmake --build "$build" --config Release -j "${JOBS:-2}" --target llama-server llama-batched-bench
ls -la "$build/bin/llama-server" "$build/bin/llama-batched-bench"
