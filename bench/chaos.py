"""Chaos: kill and starve Juggler on purpose and check it fails clearly and recovers.

    .venv/bin/python bench/chaos.py [--rounds 5]

1. kill-backend: SIGKILL the backend in the middle of a stream, `--rounds` times: the
   stream must end with an error event and the next request must succeed.
2. sigterm-router: SIGTERM the router in the middle of a stream: the stream must end
   with an error event after the drain time, and no process may be left.
3. disk-full: pull a model from a stand-in hub into a model cache on a 1 MiB tmpfs (needs
   root to mount; skipped with the reason otherwise): a clear JSON error, no partial file
   left, and the server keeps serving.
4. corrupt-gguf: register and load a file that is GGUF only in its first four bytes: a
   clear JSON error, and the next request for a good model succeeds.
Prints one line per check; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from harness import ADMIN, SMOL, Router

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}", flush=True)


def stream_events(router: Router, on_first: Any, max_tokens: int = 600) -> list[str]:
    """Stream a completion; call `on_first()` after a few chunks; return the data lines."""
    body = {"model": SMOL, "prompt": "Count:", "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True}  # fmt: skip
    lines: list[str] = []
    with (
        httpx.Client(timeout=120) as c,
        c.stream("POST", router.base_url + "/api/v1/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                if len(lines) == 5:
                    on_first()
    return lines


def ends_with_error(lines: list[str]) -> bool:
    with contextlib.suppress(ValueError, IndexError):
        return "error" in json.loads(lines[-1])
    return False


def chat_ok(router: Router) -> bool:
    body = {"model": SMOL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    r = httpx.post(router.base_url + "/api/v1/chat/completions", json=body, timeout=180)
    return r.status_code == 200


def kill_backend(rounds: int) -> None:
    router = Router.start("--model", SMOL, "--ctx-size", "1024")
    try:
        for i in range(rounds):
            health = router.wait_loaded(SMOL)
            pid = next(m["pid"] for m in health["all_models_loaded"] if m["model_name"] == SMOL)
            lines = stream_events(router, lambda pid=pid: os.kill(pid, signal.SIGKILL))
            check(f"kill-backend {i + 1}: stream ends with an error event", ends_with_error(lines),
                  lines[-1][:120] if lines else "no events")  # fmt: skip
            t0 = time.monotonic()
            check(f"kill-backend {i + 1}: next request succeeds", chat_ok(router),
                  f"in {time.monotonic() - t0:.1f} s")  # fmt: skip
    finally:
        check("kill-backend: no process left", not router.stop())


def sigterm_router() -> None:
    router = Router.start("--model", SMOL, "--ctx-size", "2048", env={"JUGGLER_DRAIN_TIMEOUT": "2"})
    router.wait_loaded(SMOL)
    t0 = [0.0]

    def term() -> None:
        t0[0] = time.monotonic()
        router.proc.send_signal(signal.SIGTERM)

    lines = stream_events(router, term, max_tokens=1900)
    took = time.monotonic() - t0[0]
    check("sigterm-router: stream ends with an error event", ends_with_error(lines),
          f"after {took:.1f} s: {lines[-1][:100] if lines else ''}")  # fmt: skip
    check("sigterm-router: no process left", not router.stop())


class _Hub(BaseHTTPRequestHandler):
    size = 4 << 20

    def do_GET(self) -> None:
        if self.path.startswith("/api/models/"):
            body = json.dumps([{"type": "file", "path": "big-Q4_K_M.gguf"}]).encode()
        else:
            body = b"GGUF" + os.urandom(self.size - 4)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def disk_full() -> None:
    with hub() as url:
        router = Router.start("--model", SMOL, "--ctx-size", "1024", env={"HF_ENDPOINT": url})
        models = router.home / "models"
        models.mkdir(exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(models)],
                                 capture_output=True, text=True)  # fmt: skip
        try:
            if mounted.returncode != 0:
                check("disk-full: skipped", True, f"cannot mount a tmpfs: {mounted.stderr.strip()}")
                return
            router.wait_loaded(SMOL)
            body = {"model_name": "user.big", "checkpoint": "org/big:Q4_K_M"}
            r = httpx.post(router.base_url + "/api/v1/pull", json=body, headers=ADMIN, timeout=120)
            err = (
                r.json().get("error", {})
                if r.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            check("disk-full: a clear JSON error", r.status_code == 507 and err.get("code") == "insufficient_storage",
                  f"{r.status_code} {r.text[:120]}")  # fmt: skip
            leftovers = [
                p.name for p in models.rglob("*") if p.is_file() and not p.name.endswith(".lock")
            ]
            check("disk-full: no partial file left", not leftovers, str(leftovers))
            check("disk-full: the server keeps serving", chat_ok(router))
        finally:
            if mounted.returncode == 0:
                subprocess.run(["umount", "-l", str(models)], check=False)
            router.stop()


def corrupt_gguf() -> None:
    router = Router.start("--model", SMOL, "--ctx-size", "1024")
    try:
        router.wait_loaded(SMOL)
        path = router.home / "models" / "corrupt.gguf"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"GGUF" + os.urandom(1 << 20))
        base = router.base_url
        r = httpx.post(
            base + "/api/v1/pull", json={"model_name": "user.corrupt", "checkpoint": str(path)}
        )
        check(
            "corrupt-gguf: registered (inside the model cache)", r.status_code == 200, r.text[:100]
        )
        r = httpx.post(base + "/api/v1/load", json={"model_name": "user.corrupt"}, timeout=180)
        err = r.json().get("error", {})
        check("corrupt-gguf: load fails with a clear JSON error", r.status_code >= 400 and "message" in err,
              f"{r.status_code} {err.get('code')}: {str(err.get('message'))[:100]}")  # fmt: skip
        check("corrupt-gguf: the next request for a good model succeeds", chat_ok(router))
    finally:
        check("corrupt-gguf: no process left", not router.stop())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    kill_backend(args.rounds)
    sigterm_router()
    disk_full()
    corrupt_gguf()
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
