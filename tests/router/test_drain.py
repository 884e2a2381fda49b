"""Graceful drain on SIGTERM (issue 10, point 6: "SIGTERM cuts streams longer than 5 s
with no error event"): streams go on for `drain_timeout`, then end with an error event;
the backends exit with the router."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, start_server

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def test_sigterm_lets_streams_run_then_ends_them_with_an_error_event(tmp_path: Path) -> None:
    drain_s = 5.0
    server = start_server(
        tmp_path,
        "--model",
        DEFAULT_MODEL,
        "--ctx-size",
        "2048",
        env={"JUGGLER_DRAIN_TIMEOUT": str(drain_s)},
    )
    try:
        health = server.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        backend_pid = int(health["all_models_loaded"][0]["pid"])  # type: ignore[index]
        events: list[tuple[float, str]] = []
        started = threading.Event()

        def stream(max_tokens: int, out: list[tuple[float, str]]) -> None:
            body = {
                "model": DEFAULT_MODEL,
                "prompt": "Count:",
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
            with (
                httpx.Client(timeout=60) as c,
                c.stream("POST", server.base_url + "/api/v1/completions", json=body) as r,
            ):
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        out.append((time.monotonic(), line[6:]))
                        started.set()

        long = threading.Thread(target=stream, args=(1900, events))
        long.start()
        assert started.wait(60)
        t_term = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        long.join(60)
        assert not long.is_alive()
        after = [(t, d) for t, d in events if t > t_term]
        # Tokens still came after the signal (a stream cut at once would have none; on a
        # machine busy with other work a token can take a second, so no more is asked).
        assert any(t - t_term > 0.5 for t, _ in after[:-1]), "the stream stopped early"
        last = json.loads(events[-1][1])
        assert "error" in last, f"the stream ended without an error event: {events[-1][1]}"
        assert "shutting down" in last["error"]["message"]
        assert events[-1][0] - t_term < drain_s + 3
        server.process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(backend_pid):
            assert time.monotonic() < deadline, "the backend outlived the router"
            time.sleep(0.1)
    finally:
        server.stop()
