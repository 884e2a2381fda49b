"""What the reliability harness (storm.py, chaos.py) shares: a router on a fresh home,
its process tree, and how a request's outcome is classed.

Outcomes: `ok` (2xx, and a stream that ended with its done marker), `clear` (a 4xx with
an OpenAI-shaped JSON error, or a stream that ended with a 4xx-class error event),
`5xx` (a 5xx, or a stream ending with a server-class error event), `hung` (no answer
within the client's deadline), `transport` (the connection broke).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
ADMIN_KEY = "harness-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SMOL = "SmolLM2-135M-Instruct-GGUF"
GEMMA = "Gemma-3-270M-GGUF"
#: Error codes that mean the server failed, not the request.
SERVER_CODES = {"backend_error", "engine_dead", "internal_error", "overloaded", "engine_error"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ppid_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(root: int) -> set[int]:
    """Every live process below `root` (by parent pid)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            parent = ppid_of(int(p.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(p.name))
    out: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def num_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Router:
    """A `juggler serve` process with its own fresh home (removed on stop)."""

    proc: subprocess.Popen[bytes]
    base_url: str
    home: Path
    log: Path
    #: Every backend pid ever seen in /health (for the leak check).
    seen_pids: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, *args: str, env: dict[str, str] | None = None, threads: int = 1) -> Router:
        home = Path(tempfile.mkdtemp(prefix="juggler-harness-"))
        port = free_port()
        log = home / "router.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
        full_env.update({"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})})
        cmd = [
            sys.executable, "-m", "juggler", "serve", "--port", str(port),
            "--threads", str(threads), "--admin-api-key", ADMIN_KEY, *args,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
            )
        router = cls(proc, f"http://127.0.0.1:{port}", home, log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"router exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(router.base_url + "/live", timeout=2).status_code == 200:
                    return router
            time.sleep(0.1)
        router.stop()
        raise RuntimeError("router did not start")

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(self.base_url + "/api/v1/health", timeout=10).json()
        self.seen_pids.update(int(m["pid"]) for m in data["all_models_loaded"] if m.get("pid"))
        return data

    def wait_loaded(self, name: str, timeout_s: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                h = self.health()
                if any(
                    m["model_name"] == name and m["status"] == "ready"
                    for m in h["all_models_loaded"]
                ):
                    return h
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not load")

    def processes(self) -> set[int]:
        return {self.proc.pid, *descendants(self.proc.pid)}

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60) -> list[int]:
        """Stop the router; returns the processes left alive (leaks), then kills them."""
        tracked = self.processes() | self.seen_pids
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout_s)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(is_alive(p) for p in tracked):
            time.sleep(0.1)
        leaked = sorted(p for p in tracked if is_alive(p))
        for pid in leaked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        shutil.rmtree(self.home, ignore_errors=True)
        return leaked


#: The first body seen for each (outcome, status or error code), for the report.
EXAMPLES: dict[tuple[str, str], str] = {}


def _example(outcome: str, key: object, text: str) -> None:
    EXAMPLES.setdefault((outcome, str(key)), text[:300])


def classify_status(status: int, body: bytes) -> str:
    if status < 300:
        return "ok"
    _example("5xx" if status >= 500 else "clear", status, body.decode(errors="replace"))
    try:
        err = json.loads(body)["error"]
        shaped = isinstance(err, dict) and "message" in err and "code" in err
    except (ValueError, KeyError, TypeError):
        shaped = False
    if status >= 500:
        return "5xx"
    return "clear" if shaped else "unclear"


def classify_stream(lines: Iterable[str]) -> str:
    """A finished SSE body: ok if it ended with its done marker and no error event."""
    last: Any = None
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            return "ok"
        with contextlib.suppress(ValueError):
            last = json.loads(data)
        if isinstance(last, dict) and last.get("done") is True:
            return "ok"
        if isinstance(last, dict) and "error" in last:
            code = last["error"].get("code")
            outcome = "5xx" if code in SERVER_CODES else "clear"
            _example(outcome, f"stream {code}", data)
            return outcome
    return "transport"  # ended without a marker


def summary(counts: dict[str, Counter[str]]) -> str:
    kinds = ["ok", "clear", "5xx", "hung", "transport", "unclear"]
    rows = [f"{'operation':<12}" + "".join(f"{k:>10}" for k in kinds)]
    total: Counter[str] = Counter()
    for op, c in sorted(counts.items()):
        total.update(c)
        rows.append(f"{op:<12}" + "".join(f"{c[k]:>10}" for k in kinds))
    rows.append(f"{'total':<12}" + "".join(f"{total[k]:>10}" for k in kinds))
    n = sum(total.values()) or 1
    rows += [f"  e.g. {o} {k}: {text}" for (o, k), text in sorted(EXAMPLES.items())]
    rows.append(
        f"OK or clear error: {100 * (total['ok'] + total['clear']) / n:.1f}%  "
        f"hung: {total['hung']}  5xx: {total['5xx']}  transport: {total['transport']}"
    )
    return "\n".join(rows)
