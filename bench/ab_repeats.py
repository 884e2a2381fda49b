"""A/B of repeated greedy requests between two source trees (issue 23): how fast a chat
asked again is answered the first, second, ... time. Never part of the tests.

    git worktree add /tmp/juggler-before <commit>
    .venv/bin/python bench/ab_repeats.py --a /tmp/juggler-before [--b .] [--asks 4]
        [--workloads records,table,quote,story] [--items 3] [--engine-args "..."]

Starts one backend (`python -m juggler.engine`, SmolLM2, 2 threads, 8 sequences,
speculation on by default) from each tree and sends each item of each
`bench/spec_workloads.py` workload `--asks` times to both, one at a time, alternating
which tree goes first. Prints every item's tokens/s per ask, then per ask the median
tokens/s of each tree and the median of the per-item B/A ratios. Ask 0 is the first
time a prompt is asked (nothing to recall); ask 1 the first repeat.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import httpx
from bench_engine import Server, free_port, smol_path, start, wait_ready
from spec_workloads import messages


def backend(tree: Path, name: str, extra: list[str]) -> Server:
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(smol_path()),
        "--model-name", "smol", "--port", str(port), "--threads", "2", "--parallel", "8",
        "--ctx-size", "16384", "--cache-cells", "16384", *extra,
    ]  # fmt: skip
    proc, log = start(cmd, f"repeats-{name}", {"PYTHONPATH": str(tree)})
    server = Server(name, proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def ask(server: Server, workload: str, item: int) -> float:
    body = {"model": "smol", "messages": messages(workload, item), "max_tokens": 160,
            "temperature": 0}  # fmt: skip
    t0 = time.perf_counter()
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"]) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--a", type=Path, required=True)
    p.add_argument("--b", type=Path, default=Path(__file__).resolve().parent.parent)
    p.add_argument("--asks", type=int, default=4)
    p.add_argument("--items", type=int, default=3)
    p.add_argument("--workloads", default="records,table,quote,story")
    p.add_argument("--engine-args", default="")
    args = p.parse_args()
    extra = shlex.split(args.engine_args)
    servers = {
        "A": backend(args.a.resolve(), "a", extra),
        "B": backend(args.b.resolve(), "b", extra),
    }
    tps: dict[tuple[str, int], list[float]] = {
        (k, a): [] for k in servers for a in range(args.asks)
    }
    try:
        for w in args.workloads.split(","):
            for item in range(args.items):
                for a in range(args.asks):
                    order = ["A", "B"] if (item + a) % 2 == 0 else ["B", "A"]
                    for k in order:
                        tps[(k, a)].append(ask(servers[k], w, item))
                cells = [f"{k}{a} {tps[(k, a)][-1]:5.0f}" for a in range(args.asks) for k in "AB"]
                print(f"{w:7s} item {item}: " + "  ".join(cells), flush=True)
        print()
        for a in range(args.asks):
            ratio = statistics.median(
                b / x for b, x in zip(tps[("B", a)], tps[("A", a)], strict=True)
            )
            print(
                f"ask {a}: A {statistics.median(tps[('A', a)]):6.1f}  "
                f"B {statistics.median(tps[('B', a)]):6.1f}  median B/A {ratio:.2f}"
            )
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
