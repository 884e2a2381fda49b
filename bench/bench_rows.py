"""What one decode costs by its number of rows (issue 23): the figure that decides how
long a speculative draft may be. Never part of the tests.

    .venv/bin/python bench/bench_rows.py [--depth 700] [--rounds 5] [--threads 2] [--streams 1]

Loads SmolLM2 (the packaged GGUF) with llama-cpp-python's low-level API, prefills
`--depth` tokens into one sequence, then decodes k rows after them (every row with
logits, as a draft is verified) for k in 1, 2, 3, ... 48, 63, 64 (the first that
llama.cpp's flash attention tiles), 96 and 128, removing them after each decode. The row counts are interleaved round by round; printed are the median time of
each and its time per row. A decode of k rows (a sampled token and a draft of k - 1)
yields k tokens when every draft token is kept, so the time per row is the best time
per token such drafts can give; the last column is the one-row decode's time over it,
the most that drafts of that length can speed up a lone stream.

With `--streams N` (N > 1) every one of N sequences is prefilled to `--depth` and each
decode holds a row for each of them, as N streams generating together do, plus k draft
rows for the first (k in 0, 1, 2, 3, 4, 6, 8, 12, 16): printed are the time of each and
what the draft rows added, and the share of them that must be kept for the draft to pay
even (N tokens in the decode without them).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import llama_cpp.llama_cpp as C
from bench_engine import smol_path

ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 63, 64, 96, 128)


EXTRA = (0, 1, 2, 3, 4, 6, 8, 12, 16)


def decode(ctx: Any, start: int, k: int, logits_all: bool, seq: int = 0) -> float:
    return decode_rows(ctx, [(seq, start + i) for i in range(k)], logits_all)


def decode_rows(ctx: Any, rows: list[tuple[int, int]], logits_all: bool = True) -> float:
    """Decode one batch of (sequence, position) rows; its time."""
    k = len(rows)
    batch = C.llama_batch_init(k, 0, 1)
    for i, (seq, pos) in enumerate(rows):
        batch.token[i] = 100 + (i * 7919 + pos) % 30000
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits_all or i == k - 1
    batch.n_tokens = k
    t0 = time.perf_counter()
    rc = C.llama_decode(ctx, batch)
    took = time.perf_counter() - t0
    C.llama_batch_free(batch)
    if rc != 0:
        raise SystemExit(f"llama_decode returned {rc}")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--depth", type=int, default=700)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--streams", type=int, default=1)
    args = p.parse_args()
    C.llama_backend_init()
    model = C.llama_model_load_from_file(str(smol_path()).encode(), C.llama_model_default_params())
    cp = C.llama_context_default_params()
    cp.n_ctx = max(4096, 2 * args.streams * (args.depth + 64))
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = args.threads
    cp.n_seq_max = max(1, args.streams)
    cp.kv_unified = True  # as the engine runs it
    cp.no_perf = True
    ctx = C.llama_init_from_model(model, cp)
    mem = C.llama_get_memory(ctx)
    if args.streams > 1:
        streams(ctx, mem, args)
        C.llama_free(ctx)
        C.llama_model_free(model)
        return
    done = 0
    while done < args.depth:
        k = min(512, args.depth - done)
        decode(ctx, done, k, logits_all=False)
        done += k
    times: dict[int, list[float]] = {k: [] for k in ROWS}
    for r in range(args.rounds):
        order = ROWS if r % 2 == 0 else tuple(reversed(ROWS))
        for k in order:
            C.llama_memory_seq_rm(mem, 0, args.depth, -1)
            times[k].append(decode(ctx, args.depth, k, logits_all=True))
    one = statistics.median(times[1])
    print(f"SmolLM2-135M, {args.threads} threads, after {args.depth} tokens, {args.rounds} rounds")
    print("rows  ms/decode  ms/row  bound")
    for k in ROWS:
        med = statistics.median(times[k])
        print(f"{k:4d}  {med * 1000:9.2f}  {med * 1000 / k:6.2f}  {one / (med / k):5.2f}x")
    C.llama_free(ctx)
    C.llama_model_free(model)


def streams(ctx: Any, mem: Any, args: argparse.Namespace) -> None:
    """`--streams N`: N one-row sequences and k draft rows for the first."""
    n = args.streams
    for seq in range(n):
        done = 0
        while done < args.depth:
            k = min(512, args.depth - done)
            decode(ctx, done, k, logits_all=False, seq=seq)
            done += k
    times: dict[int, list[float]] = {k: [] for k in EXTRA}
    for r in range(args.rounds):
        for k in EXTRA if r % 2 == 0 else tuple(reversed(EXTRA)):
            for seq in range(n):
                C.llama_memory_seq_rm(mem, seq, args.depth, -1)
            rows = [(seq, args.depth) for seq in range(n)]
            rows += [(0, args.depth + 1 + j) for j in range(k)]
            times[k].append(decode_rows(ctx, rows))
    base = statistics.median(times[0])
    print(
        f"SmolLM2-135M, {args.threads} threads, {n} streams after {args.depth} tokens each, "
        f"{args.rounds} rounds"
    )
    print("draft rows  ms/decode  +ms  kept to pay even")
    for k in EXTRA:
        med = statistics.median(times[k])
        even = f"{n * (med - base) / (base * k):6.0%}" if k else "     -"
        print(f"{k:10d}  {med * 1000:9.2f}  {(med - base) * 1000:5.1f}  {even}")


if __name__ == "__main__":
    main()
