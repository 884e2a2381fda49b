"""What the endpoint picker's scraping costs, measured (issue 12).

    .venv/bin/python bench/bench_metrics.py [--streams 16] [--rounds 6] [--hz 20]

A router on a fresh home serves SmolLM2 with `--streams` sequences. Each round runs
`--streams` streams of `--tokens` tokens each, back to back, for `--seconds`; rounds
alternate between no scraping (A) and `GET /metrics` at `--hz` (B), as the Gateway API
Inference Extension's picker does (it polls every 50 ms). Prints the /metrics latency
p50 / p99 over the B rounds (goal: p99 < 50 ms) and the median over round pairs of the
stream throughput B / A (goal: a cost under 2%, i.e. >= 0.98).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import httpx
from harness import ADMIN, SMOL, Router


def streams(base: str, n: int, tokens: int, seconds: float) -> float:
    """Tokens per second of `n` clients streaming back to back for `seconds`."""
    done = [0] * n
    stop_at = time.monotonic() + seconds
    body = {
        "model": SMOL,
        "prompt": "Write a long story about a lighthouse.",
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }

    def client(i: int) -> None:
        with httpx.Client(base_url=base, headers=ADMIN, timeout=300) as c:
            while time.monotonic() < stop_at:
                with c.stream("POST", "/v1/completions", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            done[i] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def scraper(base: str, hz: float, stop: threading.Event, latencies: list[float]) -> None:
    with httpx.Client(base_url=base, timeout=5) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            r = c.get("/metrics")
            latencies.append(time.perf_counter() - t0)
            assert r.status_code == 200
            time.sleep(max(0.0, 1 / hz - (time.perf_counter() - t0)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6, help="A/B pairs")
    ap.add_argument("--hz", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    router = Router.start(
        "--model", SMOL, "--parallel", str(args.streams), "--ctx-size", str(256 * args.streams)
    )
    latencies: list[float] = []
    ratios: list[float] = []
    try:
        router.wait_loaded(SMOL)
        streams(router.base_url, args.streams, 8, 3.0)  # warm up
        for i in range(args.rounds):
            pair: dict[str, float] = {}
            for mode in "AB" if i % 2 == 0 else "BA":
                stop = threading.Event()
                scrape = threading.Thread(
                    target=scraper, args=(router.base_url, args.hz, stop, latencies)
                )
                if mode == "B":
                    scrape.start()
                pair[mode] = streams(router.base_url, args.streams, args.tokens, args.seconds)
                stop.set()
                if mode == "B":
                    scrape.join()
            ratios.append(pair["B"] / pair["A"])
            print(
                f"round {i + 1}: {pair['A']:.1f} tok/s unscraped, {pair['B']:.1f} tok/s "
                f"scraped at {args.hz:.0f} Hz: {ratios[-1]:.3f}x",
                flush=True,
            )
    finally:
        router.stop()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    ratio = statistics.median(ratios)
    print(
        f"/metrics over {len(latencies)} scrapes during {args.streams} streams: "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (goal < 50 ms); "
        f"throughput scraped/unscraped median {ratio:.3f}x over {len(ratios)} pairs "
        f"(goal >= 0.98)"
    )
    return 0 if p99 < 50 and ratio >= 0.98 else 1


if __name__ == "__main__":
    sys.exit(main())
