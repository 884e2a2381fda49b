"""Issue 48 on a running server: the checks that run on every machine (a GPU backend the
library lacks, the context and the KV cells apart, no GPU reported where there is none)
and, marked `gpu`, the ones that need an NVIDIA GPU and a CUDA build (skipped without,
saying why)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from juggler.accel.detect import device_present
from juggler.accel.library import GPU_BACKENDS, loaded_backends
from juggler.accel.nvidia import open_nvml
from tests.conftest import DEFAULT_MODEL, RunningServer, backend_headers, start_server

pytestmark = pytest.mark.slow
HAS_CUDA = "cuda" in loaded_backends() and device_present("cuda")
NEEDS_GPU = pytest.mark.skipif(
    not HAS_CUDA,
    reason="needs an NVIDIA GPU and a CUDA build of llama.cpp "
    "(JUGGLER_LLAMA_BACKEND=cuda make install); this machine has "
    + ("no NVIDIA GPU" if not device_present("cuda") else "a CPU-only llama.cpp"),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("gpu48"), "--model", "")
    try:
        yield srv
    finally:
        srv.stop()


def load(server: RunningServer, **body: Any) -> httpx.Response:
    with server.client(timeout=300) as c:
        return c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, **body})


def entry(server: RunningServer) -> dict[str, Any]:
    models = server.health()["all_models_loaded"]
    assert isinstance(models, list)
    found: dict[str, Any] = next(m for m in models if m["model_name"] == DEFAULT_MODEL)
    return found


def ollama_ps(server: RunningServer) -> dict[str, Any]:
    """The model's entry in Ollama's /api/ps."""
    with server.client() as c:
        models = c.get("/api/ps").json()["models"]
    found: dict[str, Any] = next(m for m in models if m["name"].startswith(DEFAULT_MODEL))
    return found


def backend_health(server: RunningServer) -> dict[str, Any]:
    e = entry(server)
    with httpx.Client(timeout=10) as c:
        r = c.get(e["backend_url"] + "/health", headers=backend_headers(e["pid"]))
    body: dict[str, Any] = r.json()
    return body


def test_a_gpu_backend_the_library_lacks_is_a_400_naming_llamacpp_backend(
    server: RunningServer,
) -> None:
    """Issue 48: "A load asking for a GPU backend the library does not have is a 400
    naming `llamacpp_backend`, not a silent CPU load." """
    missing = next(b for b in GPU_BACKENDS if b not in loaded_backends())
    r = load(server, llamacpp_backend=missing)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "llamacpp_backend" and f"built without {missing}" in error["message"]
    assert all(m["model_name"] != DEFAULT_MODEL for m in server.health()["all_models_loaded"])  # type: ignore[union-attr]


def test_layers_on_the_cpu_backend_and_too_few_cells_are_400s_naming_them(
    server: RunningServer,
) -> None:
    """Issue 48: "a setting we accept takes effect or is refused with a 400 naming it"."""
    r = load(server, llamacpp_backend="cpu", n_gpu_layers=4)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n_gpu_layers", r.text
    r = load(server, ctx_size=4096, kv_cells=1024)
    assert r.status_code == 400 and r.json()["error"]["param"] == "kv_cells", r.text


@pytest.mark.skipif(HAS_CUDA or device_present("cuda"), reason="this machine has an NVIDIA GPU")
def test_system_info_and_health_report_no_gpu_here(server: RunningServer) -> None:
    """Issue 48: "system-info and health report no GPU here truthfully": no NVIDIA GPU,
    no GPU backend installed, the CPU as the default; a load runs on the CPU with none of
    its layers offloaded and nothing on a GPU, as its backend's llama.cpp says."""
    with server.client() as c:
        info = c.get("/api/v1/system-info").json()
    assert info["devices"]["nvidia_gpu"] == []
    llamacpp = info["recipes"]["llamacpp"]
    assert llamacpp["default_backend"] == "cpu"
    assert llamacpp["backends"]["cpu"]["state"] == "installed"
    assert llamacpp["backends"]["cuda"]["state"] == "unsupported"
    assert load(server).status_code == 200
    e = entry(server)
    assert e["device"] == "cpu" and e["gpu_layers"] == {"layers": 0, "of": 31}
    assert e["memory"]["vram_bytes"] == 0 and e["memory"]["vram_source"] is None
    assert e["memory"]["rss_bytes"] > 0
    backend = backend_health(server)
    assert backend["device"] == "cpu" and backend["offload"] == {"layers": 0, "of": 31}
    assert backend["backends"] == ["CPU"] and [d["type"] for d in backend["devices"]] == ["cpu"]
    assert backend["vram_bytes"] == 0 and backend["memory"]["context_vram_bytes"] == 0
    memory = server.health()["memory"]
    assert isinstance(memory, dict)
    assert [s["memory"] for s in memory["sources"]] == ["host"]
    assert ollama_ps(server)["size_vram"] == 0 and ollama_ps(server)["size"] > 0


async def _stream_one(client: httpx.AsyncClient, i: int) -> tuple[float, float, int]:
    """One streamed completion: (first token at, finished at, tokens)."""
    body = {
        "model": DEFAULT_MODEL,
        "prompt": f"Story {i}: once upon a time",
        "max_tokens": 24,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    first = 0.0
    tokens = 0
    async with client.stream("POST", "/api/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                tokens += 1
                first = first or time.monotonic()
    return first, time.monotonic(), tokens


def test_parallel_64_with_16384_kv_cells_serves_64_requests_at_once(
    server: RunningServer,
) -> None:
    """Issue 48: "`parallel 64` with `kv_cells 16384` on SmolLM2 loads and serves 64
    concurrent requests at once (they run together, not 8 at a time)". SmolLM2 was trained
    for 8,192 tokens: 16,384 cells as a context are refused, as KV cells shared by 64
    sequences of at most ctx_size tokens each they are not (llama-server's
    `-c 16384 -np 64 -kvu`). That they ran together is the backend's own figure: one
    llama_decode held all 64 sequences (`max_batch_sequences`), and every request had its
    first token before any had finished."""
    r = load(server, ctx_size=16384)
    assert r.status_code == 400 and r.json()["error"]["param"] == "ctx_size", r.text
    r = load(server, ctx_size=4096, kv_cells=16384, llamacpp_args="--parallel 64 --workers 1")
    assert r.status_code == 200, r.text
    backend = backend_health(server)
    assert (backend["parallel"], backend["ctx_size"], backend["kv_cells"]) == (64, 4096, 16384)
    before = backend_stats(server)
    assert before["kv_cells_total"] == 16384 and before["max_batch_sequences"] < 64

    async def all_of_them() -> list[tuple[float, float, int]]:
        limits = httpx.Limits(max_connections=80)
        async with httpx.AsyncClient(
            base_url=server.base_url, timeout=300, limits=limits
        ) as client:
            return await asyncio.gather(*(_stream_one(client, i) for i in range(64)))

    runs = asyncio.run(all_of_them())
    assert all(tokens >= 24 for _, _, tokens in runs)
    assert backend_stats(server)["max_batch_sequences"] == 64, "64 sequences in one decode"
    last_start = max(first for first, _, _ in runs)
    first_end = min(end for _, end, _ in runs)
    assert last_start < first_end, "some requests finished before others started"


def backend_stats(server: RunningServer) -> dict[str, Any]:
    e = entry(server)
    with httpx.Client(timeout=30) as c:
        r = c.get(e["backend_url"] + "/stats", headers=backend_headers(e["pid"]))
    body: dict[str, Any] = r.json()
    return body


def test_ollamas_num_ctx_and_lemonades_ctx_size_as_their_docs_define(
    server: RunningServer,
) -> None:
    """Issue 48: "Lemonade's and Ollama's options map onto them as their docs define".
    Ollama: "Required RAM will scale by OLLAMA_NUM_PARALLEL * OLLAMA_CONTEXT_LENGTH", so
    `num_ctx` 1024 gives each of a worker's 8 sequences 1,024 cells; Lemonade's
    `ctx_size` is llama-server's `-c` (with `-kvu`): the worker's cells, which one
    sequence may fill."""
    with server.client(timeout=300) as c:
        assert c.post("/api/v1/unload", json={}).status_code == 200
        body = {
            "model": DEFAULT_MODEL,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": False,
            "options": {"num_ctx": 1024, "num_predict": 2},
        }
        r = c.post("/api/chat", json=body)
        assert r.status_code == 200, r.text
    backend = backend_health(server)
    assert (backend["parallel"], backend["ctx_size"], backend["kv_cells"]) == (8, 1024, 8192)
    assert load(server, ctx_size=2048).status_code == 200
    backend = backend_health(server)
    assert (backend["ctx_size"], backend["kv_cells"]) == (2048, 2048)


@pytest.mark.gpu
@NEEDS_GPU
def test_cuda_offloads_every_layer_and_counts_its_vram(server: RunningServer) -> None:
    """Issue 48 (goals): "VRAM per model within 5% of nvidia-smi's per-process figure";
    `device` and the offloaded layers as llama.cpp reports them."""
    r = load(server, llamacpp_backend="cuda")
    assert r.status_code == 200, r.text
    e = entry(server)
    assert e["device"] == "gpu" and e["gpu_layers"]["layers"] == e["gpu_layers"]["of"] == 31
    nvml = open_nvml()
    assert nvml is not None
    held = nvml.process_bytes().get(e["pid"])
    assert held, "NVML lists the backend's process"
    assert abs(e["memory"]["vram_bytes"] - held) <= 0.05 * held
    assert ollama_ps(server)["size_vram"] == e["memory"]["vram_bytes"]
    partial = load(server, llamacpp_backend="cuda", n_gpu_layers=5)
    assert partial.status_code == 200, partial.text
    assert entry(server)["gpu_layers"] == {"layers": 5, "of": 31}
