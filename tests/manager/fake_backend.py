"""A stand-in OpenAI-ish backend for `command` recipe tests (stdlib only, starts fast).

    python fake_backend.py --port P --name NAME --state-dir DIR [--device npu]
        [--startup-delay S] [--fail-if-others] [--fail MESSAGE]

It writes DIR/NAME.<pid>.pid while it lives (so tests can see which backends are alive
and that none is left over) and appends `spawn`/`ready`/`exit` events with timestamps
to DIR/events.log (so tests can check that loads never overlap).
`--fail-if-others` exits 1 when another fake backend is alive: a stand-in for a load that
runs out of memory until everything else is evicted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _event(state_dir: Path, name: str, what: str) -> None:
    with (state_dir / "events.log").open("a") as f:
        f.write(f"{time.monotonic():.6f} {os.getpid()} {name} {what}\n")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--device", default="npu")
    parser.add_argument("--startup-delay", type=float, default=0.0)
    parser.add_argument("--fail-if-others", action="store_true")
    parser.add_argument("--fail", default="")
    args = parser.parse_args()
    state_dir: Path = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    _event(state_dir, args.name, "spawn")
    if args.fail:
        print(args.fail, file=sys.stderr)
        _event(state_dir, args.name, "exit")
        return 1
    if args.fail_if_others:
        others = [p for p in state_dir.glob("*.pid") if _alive(int(p.suffixes[-2][1:]))]
        if others:
            print(f"out of memory: {len(others)} other backend(s) resident", file=sys.stderr)
            _event(state_dir, args.name, "exit")
            return 1
    pid_file = state_dir / f"{args.name}.{os.getpid()}.pid"
    pid_file.write_text(str(os.getpid()))
    if args.startup_delay:
        time.sleep(args.startup_delay)  # a slow model load, simulated

    name, device = args.name, args.device

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _json(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path in ("/health", "/api/tags", "/v1/models", "/"):
                self._json({"status": "ok", "model": name, "device": device})
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            message = {"role": "assistant", "content": f"hello from {name}"}
            self._json(
                {
                    "object": "chat.completion",
                    "model": name,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                }
            )

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)

    def on_term(signum: int, frame: Any) -> None:
        pid_file.unlink(missing_ok=True)
        _event(state_dir, name, "exit")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    _event(state_dir, name, "ready")
    try:
        server.serve_forever()
    finally:
        pid_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
