#!/usr/bin/env bash
# Issue 48's GPU check: Juggler and llama.cpp's llama-server on one GPU, from a folder of
# at most 64 MiB, on a machine without network.
#
#   scripts/gpu-check.sh kit [KIT] [--python 3.12] [--without numpy]
#       Here, with network and `make install` done: write the kit into KIT (gpu-kit/):
#       the pinned llama-cpp-python sdist's llama.cpp tree, pruned (no models, docs,
#       media, benches, tests), and its `llama_cpp` Python package; Juggler's files
#       (juggler/, bench/, scripts/, pyproject.toml, as in the working tree); wheels of
#       Juggler's runtime dependencies for the target's Python (manylinux x86-64), which
#       the target may lack; SmolLM2's tokenizer as a tensor-less GGUF; this script.
#
#   KIT/gpu-check.sh run
#       There: build llama.cpp for CUDA (libllama, libmtmd and llama-server, shared, for the
#       GPU found) while the model is generated with `gguf` (bench/random_gguf.py: a random
#       1B llama, Q8_0, SmolLM2's tokenizer), install the wheels into a venv over the
#       system's packages, then print the VRAM figures (bench/gpu_vram.py: what Juggler
#       reports per model against NVML / nvidia-smi, partial offload, `juggler ps`,
#       llama-server's) and issue 47's throughput table (bench/bench_host.py: Juggler
#       against llama-server -ngl 99 at 1/8/32/64 streams). About 4-5 minutes of build and
#       2-3 of measuring on 16 cores: within 9 minutes.
#
# `run` settings (environment):
#   GPU_CHECK_BACKEND  cuda (default) or cpu: the CPU rehearsal of the same steps
#   GPU_CHECK_LIB      a folder with libllama.so already built: no build (with
#   GPU_CHECK_BIN      ... and the folder with its llama-server; default: GPU_CHECK_LIB)
#   GPU_CHECK_MODEL    1b (default) or tiny (issue 47's host-bound 2x64 model)
#   GPU_CHECK_LEVELS   1,8,32,64     GPU_CHECK_ROUNDS 1     GPU_CHECK_MODES plain,sse
#   GPU_CHECK_TARGET   tokens a burst (2048)
#   GPU_CHECK_WORK     where to build and run (KIT/work)
#   PYTHON             the interpreter (python3)
set -euo pipefail
VERSION=0.3.36
LIMIT=$((64 * 1024 * 1024))
here="$(cd "$(dirname "$0")" && pwd)"

log() { printf '[gpu-check %4ss] %s\n' "$SECONDS" "$*" >&2; }

make_kit() {
  local repo kit py="3.12" numpy=1
  repo="$(cd "$here/.." && pwd)"
  kit="$repo/gpu-kit"
  while [ $# -gt 0 ]; do
    case "$1" in
      --python) py="$2"; shift 2 ;;
      --without) [ "$2" = numpy ] && numpy=0; shift 2 ;;
      *) kit="$(mkdir -p "$1" && cd "$1" && pwd)"; shift ;;
    esac
  done
  local venv="$repo/.venv/bin/python"
  [ -x "$venv" ] || { echo "run make install first" >&2; exit 2; }
  rm -rf "$kit" && mkdir -p "$kit/wheels"
  local src="$repo/bench/_src" tree
  tree="$src/llama_cpp_python-$VERSION"
  if [ ! -d "$tree" ]; then
    mkdir -p "$src"
    [ -f "$tree.tar.gz" ] || "$venv" -m pip download -q --no-deps --no-binary :all: \
      "llama-cpp-python==$VERSION" -d "$src"
    tar -xzf "$tree.tar.gz" -C "$src"
  fi
  log "kit: llama.cpp sources (pruned) and the llama_cpp package"
  tar -czf "$kit/llama.cpp.tar.gz" -C "$src" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/models" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/docs" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/media" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/benches" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/tests" \
    --exclude="llama_cpp_python-$VERSION/vendor/llama.cpp/.git*" \
    --exclude="*.png" --exclude="*.jpg" --exclude="*.gguf" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp" "llama_cpp_python-$VERSION/llama_cpp"
  log "kit: Juggler (the working tree's tracked files)"
  (cd "$repo" && git ls-files -co --exclude-standard juggler bench scripts pyproject.toml \
    | tar -czf "$kit/juggler.tar.gz" -T -)
  log "kit: wheels for Python $py"
  local reqs=(fastapi "uvicorn[standard]" httpx pydantic typer rich prometheus-client
    nvidia-ml-py gguf orjson huggingface-hub diskcache jinja2 typing-extensions)
  [ "$numpy" = 1 ] && reqs+=(numpy)
  "$venv" -m pip download -q --only-binary=:all: --python-version "$py" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -c "$repo/constraints.txt" -d "$kit/wheels" "${reqs[@]}"
  log "kit: SmolLM2's tokenizer"
  "$venv" "$repo/bench/random_gguf.py" --tokenizer-only "$kit/tokenizer.gguf" >/dev/null
  cp "$here/gpu-check.sh" "$kit/gpu-check.sh"
  echo "python $py" > "$kit/MANIFEST"
  local size
  size=$(du -sb "$kit" | cut -f1)
  log "kit: $kit, $((size / 1024 / 1024)) MiB ($(ls "$kit/wheels" | wc -l) wheels)"
  [ "$size" -le "$LIMIT" ] || { echo "the kit is over 64 MiB" >&2; exit 1; }
}

run_kit() {
  local kit="$here" backend=${GPU_CHECK_BACKEND:-cuda} py=${PYTHON:-python3}
  local work=${GPU_CHECK_WORK:-$here/work}
  mkdir -p "$work"
  log "backend $backend on $(nproc) cores; $("$py" --version 2>&1); kit $(cat "$kit/MANIFEST")"
  local want have
  want=$(cut -d' ' -f2 "$kit/MANIFEST")
  have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$want" != "$have" ]; then
    echo "the kit's wheels are for Python $want, $py is $have: make the kit with" \
      "--python $have, or set PYTHON to a python$want" >&2
    exit 2
  fi
  if [ "$backend" = cuda ]; then
    nvidia-smi -L >&2 || { echo "no NVIDIA GPU (nvidia-smi -L)" >&2; exit 2; }
    if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
      export CUDACXX=/usr/local/cuda/bin/nvcc
    fi
  fi
  rm -rf "$work/src" "$work/juggler" && mkdir -p "$work/src" "$work/juggler"
  tar -xzf "$kit/llama.cpp.tar.gz" -C "$work/src"
  tar -xzf "$kit/juggler.tar.gz" -C "$work/juggler"
  local sdist="$work/src/llama_cpp_python-$VERSION"
  local lib=${GPU_CHECK_LIB:-} bin=${GPU_CHECK_BIN:-${GPU_CHECK_LIB:-}} build_pid=""
  if [ -z "$lib" ]; then
    local build="$work/build" cuda_flags=()
    lib="$build/bin" bin="$build/bin"
    if [ "$backend" = cuda ]; then
      cuda_flags=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-native}")
    fi
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    log "building llama.cpp ($backend) in the background"
    ( cmake -S "$sdist/vendor/llama.cpp" -B "$build" "${gen[@]}" "${cuda_flags[@]}" \
        -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release >"$work/build.log" 2>&1 \
      && cmake --build "$build" --target llama mtmd llama-server -j "$(nproc)" >>"$work/build.log" 2>&1
    ) &
    build_pid=$!
  fi
  log "python: a venv over the system's packages, the kit's wheels in it"
  rm -rf "$work/venv"
  "$py" -m venv --system-site-packages "$work/venv"
  "$work/venv/bin/python" -m pip install -q --no-index --no-deps "$kit"/wheels/*.whl
  local vpy="$work/venv/bin/python"
  export PYTHONPATH="$work/juggler:$sdist"
  log "model: generated with gguf (${GPU_CHECK_MODEL:-1b})"
  local model="$work/model.gguf" tiny=()
  [ "${GPU_CHECK_MODEL:-1b}" = tiny ] && tiny=(--tiny)
  "$vpy" "$work/juggler/bench/random_gguf.py" --out "$model" --tokenizer "$kit/tokenizer.gguf" \
    "${tiny[@]}" >/dev/null
  if [ -n "$build_pid" ]; then
    wait "$build_pid" || { tail -30 "$work/build.log" >&2; echo "build failed" >&2; exit 1; }
    log "llama.cpp built"
  fi
  export LLAMA_CPP_LIB_PATH="$lib" JUGGLER_LLAMA_BIN="$bin" PYTHONUNBUFFERED=1
  log "VRAM figures"
  "$vpy" "$work/juggler/bench/gpu_vram.py" "$model"
  log "throughput (issue 47's table)"
  local llama_args=""
  [ "$backend" = cuda ] && llama_args="-ngl 99"
  "$vpy" "$work/juggler/bench/bench_host.py" --model-path "$model" \
    --rounds "${GPU_CHECK_ROUNDS:-1}" --levels "${GPU_CHECK_LEVELS:-1,8,32,64}" \
    --modes "${GPU_CHECK_MODES:-plain,sse}" --target "${GPU_CHECK_TARGET:-2048}" \
    --llama-args="$llama_args"
  log "done in $SECONDS s"
}

case "${1:-}" in
  kit) shift; make_kit "$@" ;;
  run) shift; run_kit "$@" ;;
  *) echo "usage: $0 kit [KIT] [--python 3.12] [--without numpy] | $0 run" >&2; exit 2 ;;
esac
