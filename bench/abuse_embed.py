"""Issue 52's embeddings classes for `abuse.py`: a heavy embeddings request beside a
one-word embedding, waited for or abandoned by its client.

Each class prints the heavy request's outcome and the one-word embedding's latency in
seconds (p50 and max) while the heavy request runs and right after it ended or its client
left; the goal is 2 s at most in both. A client that leaves is a socket closed before the
answer, as a client that gives up does.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from juggler.api.embeddings import MAX_EMBEDDING_TOKENS

MINILM = "all-MiniLM-L6-v2-GGUF"
#: MiniLM's context: the longest input.
INPUT_TOKENS = 512
#: The largest legal request: as many full inputs as the token bound allows.
NUM_MAX_INPUTS = MAX_EMBEDDING_TOKENS // INPUT_TOKENS
#: A text of about `INPUT_TOKENS - 2` WordPiece tokens (a word and a space each).
TEXT = "word " * (INPUT_TOKENS - 2)


def ids(n: int) -> list[list[int]]:
    return [[1000 + (i * 7 + j) % 20000 for j in range(INPUT_TOKENS)] for i in range(n)]


def one_word(url: str) -> float:
    """Seconds a one-word embedding takes (it must answer 200)."""
    t = time.perf_counter()
    r = httpx.post(url + "/v1/embeddings", json={"model": MINILM, "input": "hello"}, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t


def send_raw(url: str, body: dict[str, Any]) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=600)
    sock.sendall(
        f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )
    return sock


def waited(url: str, body: dict[str, Any]) -> Callable[[], str]:
    def go() -> str:
        r = httpx.post(url + "/v1/embeddings", json=body, timeout=3600)
        return f"{r.status_code}, {r.json().get('usage', {}).get('prompt_tokens', '?')} tokens"

    return go


def abandoned(url: str, bodies: list[dict[str, Any]], after_s: float) -> Callable[[], str]:
    def go() -> str:
        socks = [send_raw(url, b) for b in bodies]
        time.sleep(after_s)
        for s in socks:
            s.close()
        return f"{len(socks)} left after {after_s:.0f} s"

    return go


def sample_while(url: str, thread: threading.Thread, most: int) -> list[float]:
    """One-word latencies, one after another, while `thread` runs (at least one)."""
    out = [one_word(url)]
    while thread.is_alive() and len(out) < most:
        out.append(one_word(url))
    return out


def summary(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs):.2f} s, max {max(xs):.2f} s (n={len(xs)})"


def embedding_classes(url: str, samples: int) -> None:
    one_word(url)  # loads MiniLM beside SmolLM2
    alone = [one_word(url) for _ in range(samples)]
    print(f"one-word embedding alone: {summary(alone)}", flush=True)
    maximal = {"model": MINILM, "input": ids(NUM_MAX_INPUTS)}
    texts = {"model": MINILM, "input": [TEXT] * NUM_MAX_INPUTS}
    quarter = {"model": MINILM, "input": ids(128)}
    classes = {
        f"maximal embeddings ({NUM_MAX_INPUTS} x {INPUT_TOKENS} ids), waited for": waited(
            url, maximal
        ),
        "the same, client gone after 5 s": abandoned(url, [maximal], 5.0),
        f"{NUM_MAX_INPUTS} texts of ~{INPUT_TOKENS} tokens, client gone after 5 s": abandoned(
            url, [texts], 5.0
        ),
        "4 x (128 x 512 ids), each client gone after 1 s": abandoned(url, [quarter] * 4, 1.0),
    }
    for name, heavy in classes.items():
        result: dict[str, Any] = {}

        def run(h: Callable[[], str] = heavy, out: dict[str, Any] = result) -> None:
            t = time.perf_counter()
            out["status"] = h()
            out["took"] = time.perf_counter() - t

        t = threading.Thread(target=run)
        t.start()
        during = sample_while(url, t, most=10_000)
        t.join()
        after = [one_word(url) for _ in range(samples)]
        print(
            f"{name}: -> {result['status']} in {result['took']:.1f} s; one-word embedding "
            f"during {summary(during)}; right after {summary(after)}",
            flush=True,
        )
