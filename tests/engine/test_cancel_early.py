"""Issue 27: "Cancellation end to end: when a client goes away, streaming or not, its
work stops within about a second in the router, the backend and the engine, including
work that has not reached generation yet." Here: requests still waiting for a sequence
behind a long generation, on a real SmolLM2 backend with one sequence."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine.conftest import Backend, start_backend

pytestmark = pytest.mark.slow

HOG = {"prompt": "Write forever:", "max_tokens": 3000, "ignore_eos": True, "stream": True}
QUEUED = {"prompt": "Say hi", "max_tokens": 4}


@pytest.fixture()
def one_sequence(smol_path: Path, tmp_path: Path) -> Iterator[Backend]:
    b = start_backend(smol_path, "one", tmp_path, "--parallel", "1")
    try:
        yield b
    finally:
        b.stop()


def wait_for(check: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling interval


def counts(b: Backend) -> tuple[object, object]:
    s = b.stats()
    return s["requests_running"], s["requests_waiting"]


def send_raw(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """A request sent on a bare socket (an HTTP client would wait for the answer)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


@pytest.mark.parametrize("stream", [False, True])
def test_a_queued_request_whose_client_left_leaves_the_queue(
    one_sequence: Backend, stream: bool
) -> None:
    b = one_sequence
    with b.client() as hog_client, hog_client.stream("POST", "/v1/completions", json=HOG) as hog:
        lines = hog.iter_lines()
        next(line for line in lines if '"text"' in line)  # the hog holds the only sequence
        with send_raw(b.url, "/v1/completions", {**QUEUED, "stream": stream}):
            wait_for(lambda: counts(b) == (1, 1), "the second request never queued")
        # The client left: its request leaves the queue while the hog still generates.
        wait_for(lambda: counts(b) == (1, 0), "a gone client's request stayed queued", 10.0)
        next(lines)  # and the hog was not disturbed
