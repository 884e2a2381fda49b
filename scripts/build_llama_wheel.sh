#!/usr/bin/env bash
# Build the pinned llama-cpp-python from source, once, into Juggler's wheel cache, and
# print that folder (for `pip install --find-links`).
#
# Why not plain `pip install`: llama.cpp's default native CPU build turns on AMX where the
# CPU lists it, and on some VMs (these among them) the `ldtilecfg` instruction then faults
# on the first decode. We keep -march=native but switch AMX off. pip's own wheel cache does
# not key on CMAKE_ARGS, so the wheel lives in a folder named after its flags instead.
set -euo pipefail
python=${1:?usage: build_llama_wheel.sh PYTHON}
version=0.3.36
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
dir="${JUGGLER_WHEEL_CACHE:-$HOME/.cache/juggler/wheels}/llama-cpp-python-$version-native-noamx"
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "building llama-cpp-python $version from source (about 8 minutes on 2 cores)..." >&2
  tmp=$(mktemp -d)
  CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$flags' -DCMAKE_CXX_FLAGS='$flags'" \
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
      -w "$tmp" "llama-cpp-python==$version" >&2
  mkdir -p "$dir"
  mv "$tmp"/llama_cpp_python-*.whl "$dir"/
  rm -rf "$tmp"
fi
echo "$dir"
