"""Fixtures that start a real `juggler serve` process on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

DEFAULT_MODEL = "SmolLM2-135M-Instruct-GGUF"
GEMMA = "Gemma-3-270M-GGUF"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class RunningServer:
    base_url: str
    process: subprocess.Popen[bytes]
    home: Path
    log: Path
    api_key: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout)

    def health(self) -> dict[str, object]:
        with self.client() as c:
            data: dict[str, object] = c.get("/api/v1/health").json()
            return data

    def wait_for(
        self, predicate: Callable[[dict[str, object]], bool], timeout_s: float = 120.0
    ) -> dict[str, object]:
        """Poll health until `predicate` holds; fail with the log tail on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"router exited: {self.log.read_text()[-3000:]}")
            try:
                data = self.health()
                if predicate(data):
                    return data
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(
            f"condition not met in {timeout_s}s; log: {self.log.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        # The router ends its backends on shutdown; the process group catches stragglers.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def start_server(
    tmp: Path, *args: str, env: dict[str, str] | None = None, api_key: str | None = None
) -> RunningServer:
    port = free_port()
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    log = tmp / "router.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
    full_env.update({"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "juggler", "serve", "--port", str(port), "--threads", "2", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    server = RunningServer(f"http://127.0.0.1:{port}", process, home, log, api_key)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"router exited at start: {log.read_text()[-3000:]}")
        try:
            with httpx.Client(timeout=2) as c:
                if c.get(server.base_url + "/live").status_code == 200:
                    return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.stop()
    raise AssertionError("router did not start in 60s")


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A router serving the default chat model, loaded and ready."""
    server = start_server(
        tmp_path_factory.mktemp("chat"), "--model", DEFAULT_MODEL, "--ctx-size", "2048"
    )
    try:
        server.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield server
    finally:
        server.stop()


def backend_headers(pid: int) -> dict[str, str]:
    """The key a backend answers to (issue 27), read from its environment as only the
    same user can: what a test needs to talk to a backend directly."""
    from juggler.backend_key import ENV, HEADER

    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    for item in environ:
        name, _, value = item.partition(b"=")
        if name.decode() == ENV:
            return {HEADER: value.decode()}
    raise AssertionError(f"backend {pid} has no {ENV}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """llama-cpp-python opens /dev/null twice when imported and never closes it: close
    those at the end, so the interpreter's exit prints no ResourceWarning about them."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        f = getattr(utils, name, None)
        if f is not None and not f.closed:
            f.close()
