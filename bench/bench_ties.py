"""Where llama.cpp's decode shape changes a greedy answer (issue 23, `schedule.ties`).
Never part of the tests.

    .venv/bin/python bench/bench_ties.py [--answers 8] [--chunks 1,2,8,63,64]
        [--workload story] [--tokens 160]

For each of `--answers` prompts of a `bench/spec_workloads.py` workload, in one context
of the engine's own llama.cpp bindings: prefill the prompt, generate `--tokens` greedy
tokens one row at a time, noting how far each token's logit led the next best, then
decode the same tokens again in chunks of K rows for each K of `--chunks` and print where
the argmax first differs from the answer, and the lead it had there ("same": nowhere).
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_engine import smol_path
from spec_workloads import messages

from juggler.engine.llama import native
from juggler.engine.llama.ports import ContextParams


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--answers", type=int, default=8)
    p.add_argument("--chunks", default="1,2,8,63,64")
    p.add_argument("--workload", default="story")
    p.add_argument("--tokens", type=int, default=160)
    args = p.parse_args()
    chunks = [int(x) for x in args.chunks.split(",")]
    native.init_backend()
    model = native.Model(str(smol_path()))
    params = ContextParams(n_ctx=4096, n_batch=512, n_ubatch=512, n_seq_max=1, n_threads=2)
    ctx = model.new_context(params)
    batch = model.new_batch(512)

    def decode(tokens: list[int], pos: int, all_logits: bool) -> None:
        batch.clear()
        for j, t in enumerate(tokens):
            batch.add(t, pos + j, 0, all_logits or j == len(tokens) - 1)
        if ctx.decode(batch) != 0:
            raise RuntimeError("llama_decode failed")

    n = args.tokens
    for item in range(args.answers):
        chat = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
            for m in messages(args.workload, item)
        )
        prompt = model.tokenize(chat + "<|im_start|>assistant\n", add_special=False)
        ctx.seq_rm(0)
        for s in range(0, len(prompt), 512):
            decode(prompt[s : s + 512], s, False)
        logits = ctx.logits_view(len(prompt[s : s + 512]) - 1).copy()
        answer, leads = [], []
        for k in range(n):
            t = int(logits.argmax())
            leads.append(float(logits[t] - np.delete(logits, t).max()))
            answer.append(t)
            decode([t], len(prompt) + k, True)
            logits = ctx.logits_view(0).copy()
        cells = [f"answer {item}: leads under 0.1 at {[i for i, x in enumerate(leads) if x < 0.1]}"]
        for size in chunks:
            ctx.seq_rm(0, len(prompt), -1)
            part = None
            for s in range(0, n - 1, size):
                chunk = answer[s : s + size]
                decode(chunk, len(prompt) + s, True)
                for j in range(len(chunk)):
                    i = s + j + 1
                    if i < n and int(ctx.logits_view(j).argmax()) != answer[i]:
                        part = i
                        break
                if part is not None:
                    break
            where = "same" if part is None else f"part at {part} (lead {leads[part]:.4f})"
            cells.append(f"K={size}: {where}")
        print("; ".join(cells), flush=True)
    ctx.close()


if __name__ == "__main__":
    main()
