"""Issue 49, part 2: memory per KV cell and tokens a second at f16 / q8_0 / q4_0 on SmolLM2.

    .venv/bin/python bench/bench_kv_cache.py [--rounds 3] [--ctx 4096] [--prompt-words 1000]
                                             [--new 128] [--types f16,q8_0,q4_0]

1. Memory per cell, as llama.cpp allocates it: a context of `--ctx` cells at each type,
   both keys and values (`cache_type_k` = `cache_type_v`); llama.cpp's own "KV buffer
   size" line divided by the cells, next to `footprint.kv_bytes_per_token`, what Juggler's fit
   check and automatic sizing count.
2. Tokens a second through Juggler's backend (`python -m juggler.engine --cache-type-k T
   --cache-type-v T`, one thread, speculation off so that only the cache differs): one
   streaming completion of a `--prompt-words` prompt (new words each time, so no cached
   prefix helps) and `--new` tokens; prefill tokens/s (prompt tokens over the time to the
   first token) and decode tokens/s (the tokens after the first over the time after it),
   of wall time and of the backend process's CPU time. The types take turns within each
   round; medians over the rounds. On a shared machine other work moves the wall figures
   a lot (the load average is printed with them); with one thread the CPU-time figures
   hardly move, so compare those there.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import cpu_seconds, smol_path, start_juggler, text_of

from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.kv_cache import KV_TYPES
from juggler.manager.footprint import kv_bytes_per_token
from juggler.registry.gguf_meta import read_info


def bytes_per_cell(model_path: Path, kinds: list[str], ctx: int) -> dict[str, float]:
    """{type: bytes a cell}, from llama.cpp's "KV buffer size = N MiB" log line (read
    through a log callback of our own while the contexts are made)."""
    import llama_cpp._logger as own_log
    import llama_cpp.llama_cpp as C

    model = Model(str(model_path))
    mib: list[float] = []

    @C.llama_log_callback  # type: ignore[misc,untyped-decorator]
    def catch(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        found = re.search(rb"KV buffer size =\s*([\d.]+) MiB", text)
        if found:
            mib.append(float(found.group(1)))

    C.llama_log_set(catch, ctypes.c_void_p(0))
    out: dict[str, float] = {}
    try:
        for kind in kinds:
            t = KV_TYPES[kind].ggml_type
            fa = 1 if KV_TYPES[kind].is_quantized else -1
            params = ContextParams(ctx, 512, 512, 1, 2, flash_attn=fa, type_k=t, type_v=t)
            before = len(mib)
            model.new_context(params).close()
            out[kind] = sum(mib[before:]) * (1 << 20) / ctx
    finally:
        C.llama_log_set(own_log.llama_log_callback, ctypes.c_void_p(0))
    return out


@dataclass
class Rates:
    """One streaming completion's figures: tokens a second of wall time and of the
    backend's CPU time, for the prompt (to the first token) and the decode (after it)."""

    prefill_wall: float
    decode_wall: float
    prefill_cpu: float
    decode_cpu: float
    prompt_tokens: int


def one_stream(url: str, pid: int, prompt: str, n_new: int) -> Rates:
    body = {
        "model": "smol",
        "prompt": prompt,
        "max_tokens": n_new,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    first = last = cpu_first = 0.0
    n_tokens = prompt_tokens = 0
    with (
        httpx.Client(timeout=600) as c,
        c.stream("POST", url + "/v1/completions", json=body) as r,
    ):
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = int(chunk["usage"]["prompt_tokens"])
                n_tokens = int(chunk["usage"]["completion_tokens"])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                last = time.perf_counter()
                if not first:
                    first, cpu_first = last, cpu_seconds(pid)
    cpu_end = cpu_seconds(pid)
    decoded = n_tokens - 1
    return Rates(
        prompt_tokens / (first - t0),
        decoded / (last - first),
        prompt_tokens / max(cpu_first - cpu0, 1e-3),
        decoded / max(cpu_end - cpu_first, 1e-3),
        prompt_tokens,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt-words", type=int, default=1000)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    args = ap.parse_args()
    kinds = args.types.split(",")
    path = smol_path()
    header = read_info(path)

    print(f"SmolLM2-135M ({path.name}), {args.ctx} cells")
    cells = bytes_per_cell(path, kinds, args.ctx)
    print(f"{'type':>6} {'bytes/cell (llama.cpp)':>24} {'bytes/cell (fit)':>18} {'vs f16':>7}")
    for kind in kinds:
        est = kv_bytes_per_token(header, (kind, kind)) or 0
        ratio = cells[kind] / cells.get("f16", cells[kind])
        print(f"{kind:>6} {cells[kind]:>24.0f} {est:>18} {ratio:>7.2f}")

    servers = {
        kind: start_juggler(
            path,
            True,
            1,
            args.ctx,
            f"--cache-type-k {kind} --cache-type-v {kind} --speculative off --threads 1",
        )
        for kind in kinds
    }
    rng = random.Random(49)
    runs: dict[str, list[Rates]] = {k: [] for k in kinds}
    try:
        for _ in range(args.rounds):
            for kind in kinds:
                prompt = f"{rng.random():.6f} " + text_of(args.prompt_words, rng)
                server = servers[kind]
                runs[kind].append(one_stream(server.url, server.proc.pid, prompt, args.new))
    finally:
        for server in servers.values():
            server.stop()
    n_prompt = runs[kinds[0]][0].prompt_tokens
    print(f"\n{n_prompt}-token prompt, {args.new} new tokens, {args.rounds} rounds (medians)")
    print("load average (1, 5, 15 min) at the end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'':>6} {'tokens/s':>21}   {'tokens/CPU-s':>21}")
    print(f"{'type':>6} {'prefill':>10} {'decode':>10}   {'prefill':>10} {'decode':>10}")
    for kind in kinds:

        def med(field: str, kind: str = kind) -> float:
            return float(statistics.median(getattr(r, field) for r in runs[kind]))

        print(
            f"{kind:>6} {med('prefill_wall'):>10.0f} {med('decode_wall'):>10.1f}   "
            f"{med('prefill_cpu'):>10.0f} {med('decode_cpu'):>10.1f}"
        )


if __name__ == "__main__":
    main()
