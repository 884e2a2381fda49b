"""Does following the compute plan cost a lone backend anything? (issue 21)

    .venv/bin/python bench/ab_compute_board.py [--pairs 8] [--flip]

Starts two SmolLM2 backends (`python -m juggler.engine`): A without a compute board, B
with one that gives it every core (so B's workers read the board before every decode and
pin the process). With --flip, B goes through a one-thread phase on one core before each
of its measurements and is then given every core back (what a model sees after sharing).
Interleaves one-stream greedy completions of 128 tokens, A then B, and prints B/A per
pair and the median. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_engine import Server, free_port, smol_path, start, wait_ready

from juggler.compute.board import ENV, BoardWriter
from juggler.compute.plan import Share


def backend(name: str, env: dict[str, str]) -> Server:
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(smol_path()),
        "--model-name", "smol", "--port", str(port), "--ctx-size", "2048",
    ]  # fmt: skip
    proc, log = start(cmd, name, env)
    s = Server(name, proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/health", lambda r: r.status_code == 200)
    return s


def tps(s: Server, n: int = 128) -> float:
    body = {"prompt": "Once upon a time", "max_tokens": n, "ignore_eos": True, "temperature": 0}
    t = time.perf_counter()
    httpx.post(s.url + "/v1/completions", json=body, timeout=300).raise_for_status()
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--flip", action="store_true")
    args = ap.parse_args()
    boards = BoardWriter()
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    a = backend("A", {})
    b = backend("B", {ENV: str(boards.open(1, Share(len(cpus), cpus, busy=True)))})
    try:
        tps(a), tps(b)
        ratios = []
        for _ in range(args.pairs):
            if args.flip:
                boards.write(1, Share(1, cpus[-1:], busy=True))
                tps(b, 16)
                boards.write(1, Share(len(cpus), cpus, busy=True))
            time.sleep(0.5)
            ta = tps(a)
            time.sleep(0.5)
            tb = tps(b)
            ratios.append(tb / ta)
            print(f"A {ta:.1f}  B {tb:.1f} tok/s  B/A {tb / ta:.3f}", flush=True)
        print(f"median B/A {statistics.median(ratios):.3f}")
    finally:
        a.stop()
        b.stop()
        boards.close_all()


if __name__ == "__main__":
    main()
