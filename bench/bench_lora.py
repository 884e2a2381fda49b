"""LoRA serving: what several adapters in flight cost, and which layout to choose.

    .venv/bin/python bench/bench_lora.py [--rounds 3] [--streams 8] [--tokens 96]

Seed 004 asks for several adapters in the same decode batch; llama.cpp applies adapters
per context. Juggler's engine groups each tick's work by adapter (one decode per adapter,
`schedule.batch.group_by_adapter`). This script measures aggregate tokens/s of
`--streams` concurrent completions straight to a backend (SmolLM2, 2 threads, rank-8
adapters on every attention-output and FFN-down weight), interleaved round by round:

  base      every stream on the base model (no adapter): the ceiling
  one       every stream with adapter A: what LoRA's own compute costs
  mixed     half the streams with A, half with B, one worker: grouping per tick
  spread    the same mix on two workers of one thread each: the master sends each
            adapter to the worker that has it (adapters spread across workers)

and prints each round and the medians of the ratios to `base` and to `one`.
Never part of the tests.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from bench_engine import Server, free_port, fresh_prompt, smol_path, start, wait_ready

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAYOUTS = {
    "base": ("--workers 1 --threads 2", (None,)),
    "one": ("--workers 1 --threads 2", ("a",)),
    "mixed": ("--workers 1 --threads 2", ("a", "b")),
    "spread": ("--workers 2 --threads 1", ("a", "b")),
}


def backend(flags: str, streams: int) -> Server:
    port = free_port()
    per_worker = streams if "--workers 1" in flags else max(1, streams // 2)
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(smol_path()),
        "--model-name", "smol", "--port", str(port), "--ctx-size", "4096",
        "--parallel", str(per_worker), *flags.split(),
    ]  # fmt: skip
    proc, log = start(cmd, "lora", {"PYTHONPATH": str(ROOT)})
    server = Server("lora", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def burst(
    server: Server,
    adapters: tuple[str | None, ...],
    files: dict[str, Path],
    streams: int,
    n_new: int,
    rng: random.Random,
) -> float:
    """Aggregate tokens/s of `streams` concurrent completions, adapters in turn."""
    jobs = []
    for i in range(streams):
        name = adapters[i % len(adapters)]
        body: dict[str, object] = {
            "model": "smol",
            "prompt": fresh_prompt(rng),
            "max_tokens": n_new,
            "ignore_eos": True,
            "temperature": 0.8,
        }
        if name is not None:
            body["juggler_adapter"] = {"id": name, "path": str(files[name])}
        jobs.append(body)

    def run(body: dict[str, object]) -> int:
        with httpx.Client(timeout=600) as c:
            r = c.post(server.url + "/v1/completions", json=body)
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        total = sum(pool.map(run, jobs))
    return total / (time.perf_counter() - t0)


def measure(layout: str, files: dict[str, Path], args: argparse.Namespace, seed: int) -> float:
    flags, adapters = LAYOUTS[layout]
    server = backend(flags, args.streams)
    try:
        rng = random.Random(seed)
        burst(server, adapters, files, args.streams, 8, rng)  # warm-up: loads the adapters
        return burst(server, adapters, files, args.streams, args.tokens, rng)
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--tokens", type=int, default=96)
    args = p.parse_args()
    from tests.engine.gguf_models import make_lora

    tmp = Path(tempfile.mkdtemp(prefix="bench-lora-"))
    files = {n: make_lora(smol_path(), tmp / f"{n}.gguf", seed=s) for n, s in (("a", 1), ("b", 2))}
    results: dict[str, list[float]] = {k: [] for k in LAYOUTS}
    for r in range(args.rounds):
        order = list(LAYOUTS)
        if r % 2:
            order.reverse()
        for layout in order:
            results[layout].append(measure(layout, files, args, seed=r))
        row = "  ".join(f"{k} {results[k][-1]:6.1f}" for k in LAYOUTS)
        print(f"round {r + 1}: tok/s  {row}", flush=True)
    print(f"\n{args.streams} streams x {args.tokens} tokens, medians of per-round ratios:")
    for layout in LAYOUTS:
        to_base = statistics.median(
            x / b for x, b in zip(results[layout], results["base"], strict=True)
        )
        to_one = statistics.median(
            x / b for x, b in zip(results[layout], results["one"], strict=True)
        )
        med = statistics.median(results[layout])
        print(f"  {layout:7s} {med:6.1f} tok/s   vs base {to_base:.2f}x   vs one {to_one:.2f}x")


if __name__ == "__main__":
    main()
