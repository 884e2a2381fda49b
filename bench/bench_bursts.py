"""Open-ended bursts at N streams (issue 23): speculation against none, on questions
asked for the first time and asked once again. Never part of the tests.

    .venv/bin/python bench/bench_bursts.py [--rounds 4] [--streams 8] [--tokens 160] [--seed 0]

`bench_spec.py`'s story asks the same 8 stories every round, so after its first round
every answer is one the backend gave before. Here every round asks new ones: "Write a
long story about a <animal> and a <place>", one per stream, 240 of them before they
repeat. One backend (`python -m juggler.engine`, as `bench_spec.py` starts it) serves
both configurations, interleaved (the order alternates every round); each runs a burst
of new stories (the *first ask*: drafts can come only from the text itself and from
other stories' phrases) and then the same burst again (the *first repeat*: the answers
were given once, at 8 streams, and may part at near-ties). Printed: every round's
tokens a second, and the median of the per-round ratios of speculation against none
for each kind of burst.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import bench_spec
import spec_workloads

ANIMALS = ["dragon", "otter", "fox", "owl", "whale", "badger", "heron", "lynx", "crow",
           "bear", "hare", "seal", "wolf", "moth", "goat", "crab", "eel", "swan", "toad",
           "mole", "lark", "newt", "yak", "ibis"]  # fmt: skip
PLACES = ["river", "mountain", "lighthouse", "forest", "city", "desert", "glacier", "market",
          "castle", "island"]  # fmt: skip


def story(workload: str, i: int) -> list[dict[str, Any]]:
    """Stream `i`'s story (the workload name is ignored: every burst here is stories)."""
    animal = ANIMALS[i % len(ANIMALS)]
    place = PLACES[(i // len(ANIMALS)) % len(PLACES)]
    return [{"role": "user", "content": f"Write a long story about a {animal} and a {place}."}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--seed", type=int, default=0, help="start at another item")
    args = p.parse_args()
    bench_spec.messages = story  # the bursts ask stories
    spec_workloads.messages = story
    server = bench_spec.start_backend()
    n = args.streams
    item = 1000 * args.seed
    ratios: dict[str, list[float]] = {"first ask": [], "first repeat": []}
    try:
        for r in range(args.rounds):
            tps: dict[str, tuple[float, float]] = {}
            for cfg in ("spec", "none") if r % 2 == 0 else ("none", "spec"):
                extra = {"speculative": cfg == "spec"}
                first, _ = bench_spec.burst(server.url, "story", n, args.tokens, extra, item)
                again, _ = bench_spec.burst(server.url, "story", n, args.tokens, extra, item)
                tps[cfg] = (first, again)
                item += n
            ratios["first ask"].append(tps["spec"][0] / tps["none"][0])
            ratios["first repeat"].append(tps["spec"][1] / tps["none"][1])
            print(
                f"round {r + 1} x{n}: spec {tps['spec'][0]:6.1f} / {tps['spec'][1]:6.1f}  "
                f"none {tps['none'][0]:6.1f} / {tps['none'][1]:6.1f} tok/s (first ask / repeat)"
                f"  spec/none {ratios['first ask'][-1]:.2f} / {ratios['first repeat'][-1]:.2f}",
                flush=True,
            )
        print("median of per-round ratios, speculation / none:")
        for kind, values in ratios.items():
            print(f"  {kind} x{n}: {statistics.median(values):.3f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
