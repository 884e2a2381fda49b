"""Open-ended bursts at N streams (issue 23): speculation against none, on questions
asked for the first time and asked once again. Never part of the tests.

    .venv/bin/python bench/bench_bursts.py [--rounds 4] [--streams 8] [--tokens 160] [--seed 0]
        [--aa]

`bench_spec.py`'s story asks the same 8 stories every round, so after its first round
every answer is one the backend gave before. Here every round asks new ones: "Write a
long story about a <animal> and a <place>", one per stream, 240 of them before they
repeat. Two backends (`python -m juggler.engine`, as `bench_spec.py` starts it) are
asked the same stories every round, one with speculation and one without, so neither
remembers the other's answers; they trade roles every round (both remember every
answer they gave, drafting or not: with 20 rounds of `--aa` the backend started first
was 0.97x as fast as the other on repeats, in 15 rounds of 20), and run interleaved,
A B B A (the order alternates every two rounds). Each runs a burst of new stories (the *first ask*: drafts can come only from the
text itself and from other stories' phrases) and then the same burst again (the *first
repeat*: the answers were given once, at 8 streams, and may part at near-ties).
Printed: every round's tokens a second (generated tokens over the burst's wall time: the
burst lasts as long as its slowest stream) and the mean wait for an answer (each
request's time to its last token: what a user of each stream sees), each burst's decodes
and draft tokens decoded and kept, and the medians of the per-round ratios of
speculation against none for each kind of burst.

`--aa` runs both backends without speculation: the spread of its ratios around 1.0 is
the noise of this machine and this method, the margin any spec/none figure is read
against.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import bench_spec
import spec_workloads
from bench_engine import Server

ANIMALS = ["dragon", "otter", "fox", "owl", "whale", "badger", "heron", "lynx", "crow",
           "bear", "hare", "seal", "wolf", "moth", "goat", "crab", "eel", "swan", "toad",
           "mole", "lark", "newt", "yak", "ibis"]  # fmt: skip
PLACES = ["river", "mountain", "lighthouse", "forest", "city", "desert", "glacier", "market",
          "castle", "island"]  # fmt: skip
ASK, REPEAT = "first ask", "first repeat"


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
    p.add_argument("--aa", action="store_true", help="no speculation on either backend")
    args = p.parse_args()
    bench_spec.messages = story  # type: ignore[attr-defined]  # the bursts ask stories
    spec_workloads.messages = story
    speculative = {"spec": not args.aa, "none": False}
    n = args.streams
    item = 1000 * args.seed
    ratios: dict[str, list[float]] = {ASK: [], REPEAT: []}
    waited: dict[str, list[float]] = {ASK: [], REPEAT: []}
    backends: list[Server] = []
    try:
        for _ in range(2):  # started inside the try: a failed second start stops the first
            backends.append(bench_spec.start_backend())
        for r in range(args.rounds):
            tps: dict[tuple[str, str], float] = {}
            latency: dict[tuple[str, str], float] = {}
            work: dict[tuple[str, str], str] = {}
            servers = {"spec": backends[r % 2], "none": backends[1 - r % 2]}
            a, b = ("spec", "none") if r // 2 % 2 == 0 else ("none", "spec")
            # A B B A: a slow spell of the machine (they last tens of seconds) falls on
            # both configurations alike more often than with A A B B.
            for cfg, kind in ((a, ASK), (b, ASK), (b, REPEAT), (a, REPEAT)):
                server = servers[cfg]
                before = bench_spec.spec_counts(server)
                waits: list[float] = []
                extra = {"speculative": speculative[cfg]}
                tps[cfg, kind], _ = bench_spec.burst(
                    server.url, "story", n, args.tokens, extra, item, waits
                )
                latency[cfg, kind] = statistics.mean(waits)
                after = bench_spec.spec_counts(server)
                work[cfg, kind] = (
                    f"{after[2] - before[2]} decodes, {after[0] - before[0]} drafted, "
                    f"{after[1] - before[1]} kept"
                )
            item += n
            line = f"round {r + 1} x{n}:"
            for kind in (ASK, REPEAT):
                ratios[kind].append(tps["spec", kind] / tps["none", kind])
                waited[kind].append(latency["spec", kind] / latency["none", kind])
                line += (
                    f"  {kind}: spec {tps['spec', kind]:5.1f} none {tps['none', kind]:5.1f}"
                    f" tok/s {ratios[kind][-1]:.2f}x, mean wait {waited[kind][-1]:.2f}x"
                )
            print(line, flush=True)
            for kind in (ASK, REPEAT):
                print(f"    {kind}: spec {work['spec', kind]}; none {work['none', kind]}")
        label = "A / B, neither speculating" if args.aa else "speculation / none"
        print(f"median of per-round ratios, {label}:")
        for kind in (ASK, REPEAT):
            print(
                f"  {kind} x{n}: tokens a second {statistics.median(ratios[kind]):.3f}x"
                f"  mean wait for an answer {statistics.median(waited[kind]):.3f}x"
            )
    finally:
        for server in backends:
            server.stop()


if __name__ == "__main__":
    main()
