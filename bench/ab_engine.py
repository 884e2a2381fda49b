"""A/B of the engine between two source trees: aggregate tokens/s at N concurrent streams.

    git worktree add /tmp/juggler-before <commit>
    .venv/bin/python bench/ab_engine.py --a /tmp/juggler-before [--b .] [--rounds 4]
        [--streams 8] [--tokens 128] [--engine-args "..."] [--warm]

Each round starts a backend (`python -m juggler.engine`, SmolLM2, 2 threads, 8
sequences) from tree A, measures one warm-up and one timed burst of `--streams`
concurrent completions of `--tokens` tokens each, stops it, then does the same for tree
B (the order alternates every round: A B, B A, ...). Prints each round's B/A ratio and
the median. Never part of the tests.

`--warm`: both backends start once and stay up; each round is one timed burst on each,
alternating which goes first, both asking the same prompts. One cold burst a backend
swung 0.93-1.10 against the same trees; warm pairs swung 0.98-1.07.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

from bench_engine import Server, concurrent_tps, free_port, smol_path, start, wait_ready

ROOT = Path(__file__).resolve().parent.parent


def backend(tree: Path, name: str, args: argparse.Namespace) -> Server:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "juggler.engine",
        "--model-path",
        str(smol_path()),
        "--model-name",
        "smol",
        "--port",
        str(port),
        "--threads",
        "2",
        "--parallel",
        str(max(8, args.streams)),
        "--ctx-size",
        "4096",
        *args.engine_args.split(),
    ]
    proc, log = start(cmd, name, {"PYTHONPATH": str(tree.resolve())})
    server = Server(name, proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def measure(tree: Path, name: str, args: argparse.Namespace, rng: random.Random) -> float:
    server = backend(tree, name, args)
    try:
        concurrent_tps(server, args.streams, 16, rng, "smol")  # warm-up
        return concurrent_tps(server, args.streams, args.tokens, rng, "smol")
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--a", type=Path, required=True, help="baseline source tree")
    p.add_argument("--b", type=Path, default=ROOT, help="candidate source tree")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--engine-args", default="")
    p.add_argument("--warm", action="store_true", help="both backends stay up (module doc)")
    args = p.parse_args()
    if args.warm:
        warm_rounds(args)
        return
    rng = random.Random(7)
    ratios = []
    for r in range(args.rounds):
        order = [("A", args.a), ("B", args.b)]
        if r % 2:
            order.reverse()
        got = {label: measure(tree, label, args, rng) for label, tree in order}
        ratios.append(got["B"] / got["A"])
        print(
            f"round {r + 1}: A {got['A']:.1f} tok/s  B {got['B']:.1f} tok/s  B/A {ratios[-1]:.3f}",
            flush=True,
        )
    print(f"median B/A at {args.streams} streams: {statistics.median(ratios):.3f}")


def warm_rounds(args: argparse.Namespace) -> None:
    """`--warm`: both backends up, one burst each a round, the same prompts in a round."""
    servers = {"A": backend(args.a, "A", args), "B": backend(args.b, "B", args)}
    try:
        for server in servers.values():
            concurrent_tps(server, args.streams, 16, random.Random(1), "smol")  # warm-up
        ratios = []
        for r in range(args.rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            got = {
                label: concurrent_tps(
                    servers[label], args.streams, args.tokens, random.Random(100 + r), "smol"
                )
                for label in order
            }
            ratios.append(got["B"] / got["A"])
            print(
                f"round {r + 1}: A {got['A']:.1f} tok/s  B {got['B']:.1f} tok/s  "
                f"B/A {ratios[-1]:.3f}",
                flush=True,
            )
        print(
            f"median B/A at {args.streams} streams (warm): {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}-{max(ratios):.3f})"
        )
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
