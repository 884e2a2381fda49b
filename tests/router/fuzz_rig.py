"""Schemathesis against a real router's served OpenAPI document (issue 27: "schemathesis
(pinned dev dependency) runs against the served schema: a short run in `make test`, a
long one in `make fuzz`; no 5xx, no undocumented status").

The router runs with nothing loaded, the admin key (so /internal/* is exercised as well)
and a stand-in model hub that knows no repository, so no request reaches the network.
The checks: no server error, every status and content type documented, 405 with an
`Allow` that lists the path's methods. (`positive_data_acceptance` is not among them:
a value the server cannot honour, such as `store: true` on chat, is refused with a 400
that names it, by design; the fields a handler needs are required in the document.)
schemathesis runs as its own command (its pytest plugin does not support this pytest).

`python -m tests.router.fuzz_rig [--examples N] [--max-time S]` is `make fuzz`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.conftest import start_server

CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "allow_header_conformance,unsupported_method"
)
ADMIN_KEY = "fuzz-admin"


class _NoRepos(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def run_fuzz(
    tmp: Path, *, examples: int, max_time_s: int, seed: int = 20261123, timeout_s: int = 600
) -> subprocess.CompletedProcess[str]:
    """One schemathesis run over every operation; its output and exit status."""
    hub = ThreadingHTTPServer(("127.0.0.1", 0), _NoRepos)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    server = start_server(
        tmp,
        "--model",
        "",
        "--admin-api-key",
        ADMIN_KEY,
        env={"HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}"},
    )
    try:
        return subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                server.base_url + "/openapi.json",
                "--checks",
                CHECKS,
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                str(examples),
                "--seed",
                str(seed),
                "--max-time",
                str(max_time_s),
                "--request-timeout",
                "30",
                "--header",
                f"Authorization: Bearer {ADMIN_KEY}",
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=tmp,
        )
    finally:
        server.stop()
        hub.shutdown()
        hub.server_close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="examples per operation")
    parser.add_argument("--max-time", type=int, default=1800, help="seconds at most")
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="juggler-fuzz-") as tmp:
        run = run_fuzz(
            Path(tmp),
            examples=args.examples,
            max_time_s=args.max_time,
            seed=args.seed,
            timeout_s=args.max_time + 300,
        )
    print(run.stdout[-20000:])
    print(run.stderr[-4000:], file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
