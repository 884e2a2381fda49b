"""Schemathesis over every route of a real router (issue 10): no input gives a 5xx.

The OpenAPI document declares every request body (router/openapi.py), so the fuzzer
generates bodies for the POST routes too. The router runs with nothing loaded, the
admin key (so /internal/* is exercised as well) and a stand-in model hub that knows no
repository, so no request can reach the network. Bounded: a fixed number of examples
per operation, a fixed seed, and a time budget. schemathesis runs as its own command
(its pytest plugin does not support this pytest).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_server

pytestmark = pytest.mark.slow


class _NoRepos(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_no_request_gets_a_server_error(tmp_path: Path) -> None:
    hub = ThreadingHTTPServer(("127.0.0.1", 0), _NoRepos)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    server = start_server(
        tmp_path,
        "--model",
        "",
        "--admin-api-key",
        "fuzz-admin",
        env={"HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}"},
    )
    try:
        run = subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                server.base_url + "/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                "10",
                "--seed",
                "20261123",
                "--max-time",
                "75",
                "--request-timeout",
                "30",
                "--header",
                "Authorization: Bearer fuzz-admin",
                "--workers",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=400,
            cwd=tmp_path,
        )
    finally:
        server.stop()
        hub.shutdown()
        hub.server_close()
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()
    assert any(" passed" in line for line in summary[-6:]), run.stdout[-2000:]
