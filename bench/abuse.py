"""One caller must not stall a model for everyone (issue 27): each heavy class beside a
normal chat; and (issue 52) each heavy embeddings class beside a one-word embedding.

    .venv/bin/python bench/abuse.py [--samples 8] [--classes chat|embeddings|all]

Starts `juggler serve` with SmolLM2 (ctx 2048) on a fresh home. Measures a normal chat
(8 tokens) alone, then for each heavy class: the normal chat's latency while the heavy
request runs, and again after it ended; the heavy request's status and duration; the
server's RSS (router and backends) and the router's open file descriptors. Prints p50 and
p99 against alone.

The embeddings classes (all-MiniLM-L6-v2, loaded beside SmolLM2): a maximal legal request
(`MAX_EMBEDDING_TOKENS` of token ids, 585 inputs of 512) waited for; the same abandoned
after 5 s, and as texts; four requests of 128 x 512 ids each abandoned after 1 s. For
each: a one-word embedding's latency, in seconds, while the heavy request runs and right
after it ended or its client left (issue 52's goal: within 2 s). Not part of `make test`.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from abuse_embed import embedding_classes
from harness import SMOL, Router, descendants, num_fds, rss_kb

NORMAL = {"model": SMOL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8}
BOMB = "^(a|aa|aaa|a?){1,1000}(b|c)*$"


def heavy_classes(url: str) -> dict[str, Callable[[], str]]:
    def post(path: str, body: dict[str, Any]) -> Callable[[], str]:
        def go() -> str:
            with httpx.Client(timeout=600) as c:
                r = c.post(url + path, json=body)
            return f"{r.status_code} {r.json().get('error', {}).get('code', '')}".strip()

        return go

    def sockets() -> str:
        opened = []
        host, port = url.removeprefix("http://").split(":")
        for _ in range(2000):
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(b"GET /live HTTP/1.1\r\n")  # headers never finished
            opened.append(s)
        time.sleep(5)
        for s in opened:
            s.close()
        return "2000 sockets held 5 s"

    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": BOMB}}}
    return {
        "ambiguous pattern": post(
            "/v1/chat/completions",
            {
                **NORMAL,
                "max_tokens": 64,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": schema},
                },
            },
        ),
        "ambiguous GBNF (64 ambiguous stars)": post(
            "/v1/chat/completions",
            {**NORMAL, "max_tokens": 64, "grammar": "root ::= " + '("a" | "a")* ' * 64 + '"a"'},
        ),
        "load with ctx_size 131072": post(
            "/api/v1/load", {"model_name": SMOL, "ctx_size": 131072}
        ),
        "100,000 messages": post(
            "/v1/chat/completions",
            {"model": SMOL, "messages": [{"role": "user", "content": "hi"}] * 100_000},
        ),
        "5,000 messages (over the context)": post(
            "/v1/chat/completions",
            {"model": SMOL, "messages": [{"role": "user", "content": "hi"}] * 5_000},
        ),
        "200,000 prompts": post("/v1/completions", {"model": SMOL, "prompt": ["x"] * 200_000}),
        "100,000 embedding inputs": post("/v1/embeddings", {"model": SMOL, "input": ["x"] * 100_000}),
        "repeat_penalty Infinity": lambda: _raw(url, b'{"model": "' + SMOL.encode() + b'", "prompt": "x", "repeat_penalty": Infinity}'),
        "2,000 dribbling sockets": sockets,
    }  # fmt: skip


def _raw(url: str, body: bytes) -> str:
    headers = {"Content-Type": "application/json"}
    r = httpx.post(url + "/v1/completions", content=body, headers=headers, timeout=60)
    return str(r.status_code)


def latencies(url: str, n: int) -> list[float]:
    out = []
    with httpx.Client(timeout=600) as c:
        for _ in range(n):
            t = time.perf_counter()
            c.post(url + "/v1/chat/completions", json=NORMAL).raise_for_status()
            out.append(time.perf_counter() - t)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def footprint(router: Router) -> str:
    pids = [router.proc.pid, *descendants(router.proc.pid)]
    rss = sum(rss_kb(p) for p in pids) / 1024
    return f"RSS {rss:.0f} MiB, router fds {num_fds(router.proc.pid)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--classes", choices=["chat", "embeddings", "all"], default="all")
    args = ap.parse_args()
    router = Router.start("--model", SMOL, "--ctx-size", "2048")
    try:
        router.wait_loaded(SMOL)
        if args.classes != "chat":
            embedding_classes(router.base_url, args.samples)
        if args.classes != "embeddings":
            chat_classes(router, args.samples)
    finally:
        router.stop()


def chat_classes(router: Router, samples: int) -> None:
    url = router.base_url
    latencies(url, 2)  # warm-up
    alone = latencies(url, samples)
    p50, p99 = statistics.median(alone), pct(alone, 0.99)
    print(
        f"normal chat alone: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; {footprint(router)}"
    )
    for name, heavy in heavy_classes(url).items():
        result: dict[str, Any] = {}

        def run(h: Callable[[], str] = heavy, out: dict[str, Any] = result) -> None:
            t = time.perf_counter()
            out["status"] = h()
            out["took"] = time.perf_counter() - t

        t = threading.Thread(target=run)
        t.start()
        during = latencies(url, samples)
        t.join()
        after = latencies(url, samples)
        print(
            f"{name}: heavy -> {result['status']} in {result['took']:.1f} s; normal chat "
            f"during p50 {statistics.median(during) / p50:.2f}x p99 {pct(during, 0.99) / p99:.2f}x, "
            f"after p50 {statistics.median(after) / p50:.2f}x p99 {pct(after, 0.99) / p99:.2f}x "
            f"of alone; {footprint(router)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
