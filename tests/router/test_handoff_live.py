"""Issue 47: an OpenAI stream is written by the backend straight into the client's
connection (`router.core.handoff`, `engine.http.handoff`), through a real router and a
real backend: the backend process holds the client's connection while it streams, the
stream's bytes are a normal chunked SSE answer, the connection serves the client's next
request, and a client that leaves mid-stream stops its generation."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow

LONG = 1500  # tokens: far more than are generated before the checks below end it


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """conftest's `chat_server` with room for `LONG` tokens: a generation the context
    cut short would pass the departure test without being cancelled."""
    srv = start_server(
        tmp_path_factory.mktemp("handoff"), "--model", DEFAULT_MODEL, "--ctx-size", "4096"
    )
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield srv
    finally:
        srv.stop()


class Conn:
    """One raw HTTP/1.1 connection to the router, read by hand."""

    def __init__(self, base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.port = int(port)
        self.sock = socket.create_connection((host, self.port), timeout=120)
        self.buf = b""

    def post(self, path: str, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + data)

    def _fill(self) -> None:
        got = self.sock.recv(65536)
        if not got:
            raise ConnectionError("the router closed the connection")
        self.buf += got

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split()[1]), headers

    def chunk(self) -> bytes | None:
        """The next chunk of a chunked body; None at its end."""
        size = int(self._line().split(b";")[0], 16)
        if size == 0:
            assert self._line() == b""  # no trailers
            return None
        data = self._take(size)
        assert self._take(2) == b"\r\n"
        return data

    def close(self) -> None:
        self.sock.close()


def socket_inode(server_port: int, client_port: int) -> str:
    """The inode of the router's end of our connection (/proc/net/tcp)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.split(":")[1], 16) == server_port and (
                int(remote.split(":")[1], 16) == client_port
            ):
                return fields[9]
    raise AssertionError("our connection is not in /proc/net/tcp")


def sockets_of(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[len("socket:[") : -1])
    return out


def backend_pid(server: RunningServer) -> int:
    health = httpx.get(server.base_url + "/api/v1/health", timeout=30).json()
    return next(int(m["pid"]) for m in health["all_models_loaded"] if m.get("pid"))


def stream_body(max_tokens: int) -> dict[str, object]:
    return {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


def metric(server: RunningServer, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def test_the_backend_writes_the_stream_into_the_clients_connection(
    server: RunningServer,
) -> None:
    conn = Conn(server.base_url)
    try:
        conn.post("/v1/chat/completions", stream_body(64))
        status, headers = conn.head()
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["transfer-encoding"] == "chunked"
        assert headers.get("x-request-id")  # the router's middleware still answers
        first = conn.chunk()
        assert first is not None and first.startswith(b"data: ")
        # While it streams, the backend process holds the router's end of our connection.
        inode = socket_inode(conn.port, conn.sock.getsockname()[1])
        assert inode in sockets_of(backend_pid(server))
        body = first
        while (piece := conn.chunk()) is not None:
            body += piece
        events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        content = "".join(
            json.loads(e[6:])["choices"][0]["delta"].get("content") or ""
            for e in events[:-1]
            if json.loads(e[6:])["choices"]
        )
        assert content.strip()
        # The connection is the router's again: it serves the next request.
        conn.post(
            "/v1/chat/completions",
            {**stream_body(4), "stream": False},
        )
        status, headers = conn.head()
        assert status == 200
        answer = json.loads(conn._take(int(headers["content-length"])))
        assert answer["usage"]["completion_tokens"] == 4
        assert inode not in sockets_of(backend_pid(server))  # given back at the end
    finally:
        conn.close()


def test_a_client_that_leaves_mid_stream_stops_its_generation(server: RunningServer) -> None:
    before = metric(server, "vllm:generation_tokens_total")
    conn = Conn(server.base_url)
    body = {k: v for k, v in stream_body(LONG).items() if k != "messages"}
    conn.post("/v1/completions", {**body, "prompt": "Once upon a time"})
    status, _ = conn.head()
    assert status == 200
    assert conn.chunk() is not None
    conn.close()
    # Over when nothing runs and its tokens are counted (both come with the request's
    # end; the figures are polled, so either may show first).
    deadline = time.monotonic() + 120
    while (
        metric(server, "vllm:num_requests_running") > 0
        or metric(server, "vllm:generation_tokens_total") <= before
    ):
        assert time.monotonic() < deadline, "the generation ran on for a client that left"
        time.sleep(0.2)
    made = metric(server, "vllm:generation_tokens_total") - before
    assert made < LONG  # stopped long before its max_tokens
