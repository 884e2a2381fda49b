"""Issue 14's bench: does a schema-constrained stream slow the others down?

    .venv/bin/python bench/bench_structured.py [--rounds 4] [--streams 8] [--tokens 128]
        [--temperature 0.8] [--threads 2]

One backend (`python -m juggler.engine`, SmolLM2, `--streams` sequences). Each round runs
two bursts of `--streams` concurrent streamed chat completions of exactly `--tokens`
tokens each: A, all unconstrained (ignore_eos); B, the same with half of them held to a
JSON schema whose answers are always longer than `--tokens` (so every request of both
bursts generates the same number of tokens and prefills the same prompt; speculative
decoding is off, which would favour the repetitive JSON). Aggregate tokens/s per burst; the order alternates (A B, B A, ...) and the figure is the median of
the per-round B/A ratios. Never part of the tests.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from bench_engine import Server, free_port, settle, smol_path, start, text_of, wait_ready

#: Forty words of 6 to 12 characters: always more than 128 tokens of JSON.
SCHEMA = {
    "type": "object",
    "properties": {
        "words": {
            "type": "array",
            "items": {"type": "string", "minLength": 6, "maxLength": 12},
            "minItems": 40,
            "maxItems": 40,
        }
    },
    "required": ["words"],
    "additionalProperties": False,
}


def backend(args: argparse.Namespace) -> Server:
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
        str(args.threads),
        "--parallel",
        str(args.streams),
        "--ctx-size",
        "4096",
    ]
    proc, log = start(cmd, "structured")
    server = Server("juggler", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def stream_tokens(url: str, body: dict[str, Any]) -> int:
    """Run one streamed chat completion; its completion tokens (from the usage chunk)."""
    used = 0
    with (
        httpx.Client(timeout=600) as c,
        c.stream("POST", url + "/v1/chat/completions", json=body) as r,
    ):
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                obj = json.loads(line[6:])
                if obj.get("usage"):
                    used = int(obj["usage"]["completion_tokens"])
    return used


def burst(server: Server, args: argparse.Namespace, constrained: int, rng: random.Random) -> float:
    def body(i: int) -> dict[str, Any]:
        topic = text_of(8, rng)
        out: dict[str, Any] = {
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"List words about {topic}."},
            ],
            "max_tokens": args.tokens,
            "temperature": args.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            # Measure sampling alone: repetitive JSON would gain more from prompt-lookup
            # drafts than prose does.
            "speculative": False,
        }
        if i < constrained:
            out["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "words", "schema": SCHEMA, "strict": True},
            }
        else:
            out["ignore_eos"] = True
        return out

    bodies = [body(i) for i in range(args.streams)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.streams) as pool:
        counts = list(pool.map(lambda b: stream_tokens(server.url, b), bodies))
    elapsed = time.perf_counter() - t0
    assert all(n == args.tokens for n in counts), counts
    settle()
    return sum(counts) / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    rng = random.Random(14)
    server = backend(args)
    half = args.streams // 2
    try:
        burst(server, args, half, rng)  # warm-up (both kinds)
        ratios = []
        for r in range(args.rounds):
            order = [("A", 0), ("B", half)]
            if r % 2:
                order.reverse()
            got = {label: burst(server, args, n, rng) for label, n in order}
            ratios.append(got["B"] / got["A"])
            print(
                f"round {r + 1}: A (0/{args.streams} constrained) {got['A']:.1f} tok/s  "
                f"B ({half}/{args.streams} constrained) {got['B']:.1f} tok/s  "
                f"B/A {ratios[-1]:.3f}",
                flush=True,
            )
        print(
            f"median B/A over {args.rounds} rounds: {statistics.median(ratios):.3f} "
            f"({half} of {args.streams} streams schema-constrained, {args.tokens} tokens each, "
            f"temperature {args.temperature})"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
