"""Issue 52 on a real embedding backend (all-MiniLM-L6-v2): a large embeddings request is
worked in pieces that a one-word request interleaves with, it stops when its client
leaves, and a request is bounded by its tokens, not only by its count of inputs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from juggler.api.embeddings import MAX_EMBEDDING_TOKENS
from tests.engine.conftest import Backend, start_backend

pytestmark = pytest.mark.slow

#: 400 inputs of 500 token ids of MiniLM's vocabulary: 200,000 tokens, minutes of work
#: on two cores (each input is one piece: MiniLM's context is 512).
BIG = [[1000 + (i * 7 + j) % 20000 for j in range(500)] for i in range(400)]
NUM_BIG_TOKENS = sum(len(x) for x in BIG)


@pytest.fixture(scope="module")
def backend(minilm_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = start_backend(minilm_gguf, "minilm", tmp_path_factory.mktemp("logs"), "--type", "embedding")
    try:
        yield b
    finally:
        b.stop()


def wait_until(
    what: str, check: Callable[[], bool], timeout_s: float = 120.0, log: str = ""
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)  # polling interval, not a wait for a condition
    raise AssertionError(f"{what}: not within {timeout_s} s. {log[-2000:]}")


def send_raw(url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> socket.socket:
    """POST `body` on a socket of its own and return it unread: closing it is a client
    that leaves."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock = socket.create_connection((host, int(port)), timeout=600)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{head}"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    return sock


def stats(backend: Backend) -> dict[str, Any]:
    return backend.stats()


def test_a_one_word_embedding_is_answered_while_a_large_one_runs_and_after_it_left(
    backend: Backend,
) -> None:
    """Issue 52: "Build: embedding and rerank work in bounded pieces that other requests
    interleave with (as chat's prefill already does), cancelled the moment the client
    leaves (piece boundaries are fine)". The one-word request is answered while the
    large one is still running (it is not done: its client has not had an answer), and
    once its client leaves, the large one stops: far fewer of its tokens were ever
    embedded than it holds, and no piece runs after the backend says it is idle."""
    before = stats(backend)
    sock = send_raw(backend.url, "/v1/embeddings", {"input": BIG}, {})
    try:
        wait_until(
            "the large request runs",
            lambda: stats(backend)["decode_calls_total"] > before["decode_calls_total"],
            log=backend.log(),
        )
        with backend.client() as c:
            r = c.post("/v1/embeddings", json={"input": "hello"})
        assert r.status_code == 200, r.text
        assert len(r.json()["data"][0]["embedding"]) == 384
        sock.settimeout(0.0)
        with pytest.raises(BlockingIOError):  # the large one has not answered yet
            sock.recv(1)
        assert stats(backend)["requests_running"] == 1
    finally:
        sock.close()
    wait_until("the large request stops", lambda: stats(backend)["requests_running"] == 0)
    idle = stats(backend)
    embedded = idle["prompt_tokens_prefilled_total"] - before["prompt_tokens_prefilled_total"]
    assert embedded < NUM_BIG_TOKENS // 2, (embedded, NUM_BIG_TOKENS)
    with backend.client() as c:
        r = c.post("/v1/embeddings", json={"input": "hello again"})
    assert r.status_code == 200, r.text
    # The one-word request ran one piece; the large one none after it was dropped.
    assert stats(backend)["decode_calls_total"] == idle["decode_calls_total"] + 1


def test_several_abandoned_requests_all_stop(backend: Backend) -> None:
    """Issue 52: "Four requests of 128 x 512 ids, each abandoned after 1 s, made a later
    one-word embedding wait 74.7 s": each stops when its client leaves."""
    before = stats(backend)
    socks = [send_raw(backend.url, "/v1/embeddings", {"input": BIG[:128]}, {}) for _ in range(4)]
    try:
        wait_until(
            "all four run",
            lambda: stats(backend)["requests_running"] == 4,
            log=backend.log(),
        )
    finally:
        for s in socks:
            s.close()
    wait_until("they stop", lambda: stats(backend)["requests_running"] == 0)
    embedded = stats(backend)["prompt_tokens_prefilled_total"]
    assert embedded - before["prompt_tokens_prefilled_total"] < 4 * 128 * 500 // 2
    with backend.client() as c:
        assert c.post("/v1/embeddings", json={"input": "x"}).status_code == 200


def test_a_one_word_embedding_goes_ahead_of_every_large_request(backend: Backend) -> None:
    """Issue 52: "Four requests of 128 x 512 ids [...] made a later one-word embedding
    wait 74.7 s". A one-piece request runs next, ahead of the pieces of the large ones
    still waiting: only the piece already running goes before it."""
    socks = [send_raw(backend.url, "/v1/embeddings", {"input": BIG[:128]}, {}) for _ in range(4)]
    try:
        wait_until("all four run", lambda: stats(backend)["requests_running"] == 4)
        before = stats(backend)["decode_calls_total"]
        with backend.client() as c:
            assert c.post("/v1/embeddings", json={"input": "hello"}).status_code == 200
        assert stats(backend)["decode_calls_total"] - before <= 3, "running piece, its own"
    finally:
        for s in socks:
            s.close()
    wait_until("they stop", lambda: stats(backend)["requests_running"] == 0)


def test_a_rerank_whose_client_left_stops(
    rerank_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 52: "rerank goes through the same kind of command": it too runs in pieces
    and stops when its client leaves."""
    b = start_backend(rerank_gguf, "rr", tmp_path_factory.mktemp("logs"), "--type", "reranking")
    try:
        docs = ["word " * 240] * 400
        sock = send_raw(b.url, "/v1/rerank", {"query": "q", "documents": docs}, {})
        try:
            wait_until("it runs", lambda: stats(b)["decode_calls_total"] > 0, log=b.log())
            with b.client() as c:
                r = c.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]})
            assert r.status_code == 200, r.text
        finally:
            sock.close()
        wait_until("it stops", lambda: stats(b)["requests_running"] == 0)
        assert stats(b)["decode_calls_total"] < 100, "it holds 200 pieces"
    finally:
        b.stop()


def test_a_request_is_bounded_by_its_tokens(backend: Backend) -> None:
    """Issue 52: "the same admission bound chat has (a request's total tokens, not only
    its count of inputs)": token ids are counted when the body is read, texts once the
    backend tokenized them (before any is embedded); both are 400 naming `input`."""
    n = MAX_EMBEDDING_TOKENS // 500 + 1
    ids = [[1000] * 500] * n
    text = "a " * 250  # about 250 tokens, 500 characters: the lower bound says 16
    texts = [text] * (MAX_EMBEDDING_TOKENS // 250 + 1)
    before = stats(backend)["decode_calls_total"]
    with backend.client() as c:
        for value in (ids, texts):
            r = c.post("/v1/embeddings", json={"input": value})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["param"] == "input" and str(MAX_EMBEDDING_TOKENS) in error["message"]
        assert c.post("/v1/embeddings", json={"input": ids[:2]}).status_code == 200
    assert stats(backend)["decode_calls_total"] == before + 2, "only the last was embedded"
