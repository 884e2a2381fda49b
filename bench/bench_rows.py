"""What one decode costs by its number of rows (issue 23): the figure that decides how
long a speculative draft may be. Never part of the tests.

    .venv/bin/python bench/bench_rows.py [--depth 700] [--rounds 5] [--threads 2]

Loads SmolLM2 (the packaged GGUF) with llama-cpp-python's low-level API, prefills
`--depth` tokens into one sequence, then decodes k rows after them (every row with
logits, as a draft is verified) for k in 1, 2, 4, ... 64, removing them after each
decode. The row counts are interleaved round by round; printed are the median time of
each and its time per row. A decode of k rows (a sampled token and a draft of k - 1)
yields k tokens when every draft token is kept, so the time per row is the best time
per token such drafts can give; the last column is the one-row decode's time over it,
the most that drafts of that length can speed up a lone stream.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import llama_cpp.llama_cpp as C
from bench_engine import smol_path

ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def decode(ctx: Any, start: int, k: int, logits_all: bool) -> float:
    batch = C.llama_batch_init(k, 0, 1)
    for i in range(k):
        batch.token[i] = 100 + (i * 7919 + start) % 30000
        batch.pos[i] = start + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
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
    args = p.parse_args()
    C.llama_backend_init()
    model = C.llama_model_load_from_file(str(smol_path()).encode(), C.llama_model_default_params())
    cp = C.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 4096, 512, 512
    cp.n_threads = cp.n_threads_batch = args.threads
    cp.no_perf = True
    ctx = C.llama_init_from_model(model, cp)
    mem = C.llama_get_memory(ctx)
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


if __name__ == "__main__":
    main()
