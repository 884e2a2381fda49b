"""How far a greedy token's lead moves when a decode of another shape chooses it, or when
the tokens before it were written to the KV by decodes of another shape (issue 23): the
figures behind `juggler.engine.schedule.ties`. Never part of the tests.

    .venv/bin/python bench/bench_ties.py [--tokens 159] [--cases story:0,table:0,...]

Loads SmolLM2 (the packaged GGUF) with llama-cpp-python's low-level API, one sequence
alone in a unified KV cache. For each case (a `spec_workloads` workload and item) it
prefills the chat prompt and generates a greedy answer row by row, and then compares,
at each position of the answer, the lead of the answer's token over its runner-up as:

- `one`: chosen by a one-row decode on KV written by one-row decodes (the answer);
- `few-on-one`: chosen by a two-row decode on the same KV (the decode's shape alone);
- `few`: chosen by decodes of 4 rows on KV written by them (the answer teacher-forced);
- `few63`: the same in decodes of 63 rows; `tiled`: of 128 rows.

Printed per case: the median, 99th percentile and largest move of the lead between
pairs of these, whether `few` and `few63` gave bit-identical logits, and how many of the
answer's tokens led by less than each of a few bounds, and where `few` chose otherwise than
the answer (teacher-forced, it goes on with the answer), the lead the answer had there. Over a prompt of a few tokens the
cells in use stay under 256 (llama.cpp then attends over 256 and does not split one
row's attention), and `one` equals `few` bit for bit; over a long one it does not.

With `--prompt-tail`, for each story of `--cases`: two prompts (the story and a
60-token one) are prefilled together in one tiled decode, as a worker prefills a burst,
and the story is answered greedily by two-row decodes (its token beside the other's),
as 8 streams decode; then, as a worker answers it again, the story's prompt is kept but
for its last token, which is decoded again with the answer, teacher-forced, by 4 rows
at a time. Printed: how far the leads moved and where the answer came out otherwise,
once with the story's last prompt token decoded by the tiled prefill and once held back
from it and decoded by the first two-row decode (`schedule.batch.exact_decodes`).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np
from bench_engine import smol_path
from spec_workloads import messages

from juggler.engine.llama import native
from juggler.engine.llama.ports import ContextParams

DEFAULT_CASES = "story:0,story:3,table:0,table:1,json:0,json:1,records:0,quote:0,code:0,code:1"
BOUNDS = (0.1, 0.35, 0.5, 1.0, 1.5)


class Model:
    """One sequence in a context of the engine's own llama.cpp bindings and defaults."""

    def __init__(self, threads: int) -> None:
        native.init_backend()
        self.model = native.Model(str(smol_path()))
        params = ContextParams(
            n_ctx=4096, n_batch=512, n_ubatch=512, n_seq_max=2, n_threads=threads
        )
        self.ctx = self.model.new_context(params)
        self.batch = self.model.new_batch(512)

    def prompt(self, workload: str, item: int) -> list[int]:
        chat = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages(workload, item)
        )
        return self.model.tokenize(chat + "<|im_start|>assistant\n", add_special=False)

    def decode(self, tokens: list[int], start: int) -> list[Any]:
        """Decode `tokens` at positions from `start`; a copy of each row's logits."""
        return self.decode_rows([(t, start + j, 0) for j, t in enumerate(tokens)])

    def decode_rows(self, rows: list[tuple[int, int, int]]) -> list[Any]:
        """Decode (token, position, sequence) rows; a copy of each row's logits."""
        self.batch.clear()
        for t, pos, seq in rows:
            self.batch.add(t, pos, seq, True)
        if self.ctx.decode(self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [self.ctx.logits_view(j).copy() for j in range(len(rows))]

    def drop(self, start: int) -> None:
        self.ctx.seq_rm(0, start, -1)


def lead(logits: Any, token: int) -> float:
    """How far `token`'s logit leads the best other one (negative: it does not)."""
    others = logits.copy()
    others[token] = -np.inf
    return float(logits[token] - others.max())


def measure(m: Model, workload: str, item: int, n: int) -> None:
    prompt = m.prompt(workload, item)
    p = len(prompt)
    m.drop(0)
    last: list[Any] = []
    for s in range(0, p, 512):
        last = m.decode(prompt[s : s + 512], s)
    answer = [int(np.argmax(last[-1]))]
    one: list[Any] = []
    few_on_one: list[Any] = []
    for j in range(1, n + 1):
        if j >= 2:  # the same KV, token j chosen by a decode of two rows
            m.drop(p + j - 2)
            few_on_one.append(m.decode(answer[j - 2 : j], p + j - 2)[1])
            m.drop(p + j - 2)
            m.decode(answer[j - 2 : j - 1], p + j - 2)
        row = m.decode([answer[j - 1]], p + j - 1)[0]
        one.append(row)
        answer.append(int(np.argmax(row)))
    forced: dict[int, list[Any]] = {}
    for k in (4, 63, 128):
        m.drop(p)
        forced[k] = []
        for s in range(0, n, k):
            forced[k] += m.decode(answer[s : min(s + k, n)], p + s)
    leads = {
        "one": [lead(one[j], answer[j + 1]) for j in range(n)],
        "few-on-one": [lead(few_on_one[j - 1], answer[j + 1]) for j in range(1, n)],
        "few": [lead(forced[4][j], answer[j + 1]) for j in range(n)],
        "few63": [lead(forced[63][j], answer[j + 1]) for j in range(n)],
        "tiled": [lead(forced[128][j], answer[j + 1]) for j in range(n)],
    }

    def moves(a: str, b: str) -> str:
        x, y = leads[a], leads[b]
        size = min(len(x), len(y))  # few-on-one has no first position
        d = sorted(abs(u - v) for u, v in zip(x[-size:], y[-size:], strict=True))
        p99 = d[min(len(d) - 1, int(len(d) * 0.99))]
        return f"{a}~{b} {statistics.median(d):.3f}/{p99:.3f}/{d[-1]:.3f}"

    exact = all(np.array_equal(a, b) for a, b in zip(forced[4], forced[63], strict=True))
    one_exact = sum(np.array_equal(a, b) for a, b in zip(one, forced[4], strict=True))
    # Where `few` chose otherwise than the answer: the answer's lead there.
    parted = [round(lo, 3) for lo, lf in zip(leads["one"], leads["few"], strict=True) if lf < 0]
    under = " ".join(f"<{b}:{sum(lv < b for lv in leads['one'])}" for b in BOUNDS)
    print(
        f"{workload}:{item} prompt {p} cells {p + n} | lead moves median/p99/max: "
        f"{moves('one', 'few-on-one')}  {moves('few-on-one', 'few')}  {moves('one', 'few')}  "
        f"{moves('few', 'tiled')}  {moves('few', 'few63')} | few==few63 bit for bit {exact}, "
        f"one==few {one_exact}/{n}, few parted from one where it led by {parted} | leads {under}",
        flush=True,
    )


def prompt_tail(m: Model, workload: str, item: int, n: int) -> None:
    prompt = m.prompt(workload, item)
    p = len(prompt)
    other = m.prompt("story", 7)[:20] * 3
    for hold in (False, True):
        m.ctx.seq_rm(0)
        m.ctx.seq_rm(1)
        head = prompt[:-1] if hold else prompt
        rows = m.decode_rows(
            [(t, i, 0) for i, t in enumerate(head)] + [(t, i, 1) for i, t in enumerate(other)]
        )
        at = len(other)
        if hold:
            rows = m.decode_rows([(prompt[-1], p - 1, 0), (other[-1], at, 1)])
            at += 1
        answer = [int(np.argmax(rows[0 if hold else p - 1]))]
        leads = [lead(rows[0 if hold else p - 1], answer[0])]
        for j in range(n):
            row = m.decode_rows([(answer[-1], p + j, 0), (other[-1], at, 1)])[0]
            at += 1
            answer.append(int(np.argmax(row)))
            leads.append(lead(row, answer[-1]))
        m.drop(p - 1)
        again: list[Any] = []
        forced = [prompt[-1], *answer[:n]]
        for s in range(0, len(forced), 4):
            again += m.decode(forced[s : s + 4], p - 1 + s)
        moved = max(abs(lead(again[j], answer[j]) - leads[j]) for j in range(n + 1))
        parted = [round(leads[j], 3) for j in range(n + 1) if lead(again[j], answer[j]) < 0]
        how = "by the first two-row decode" if hold else "by the tiled prefill"
        print(
            f"{workload}:{item} last prompt token decoded {how}: asked again, leads moved "
            f"by up to {moved:.3f}; came out otherwise where the answer led by {parted}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tokens", type=int, default=159)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tail", action="store_true")
    args = ap.parse_args()
    m = Model(args.threads)
    for case in args.cases.split(","):
        workload, item = case.split(":")
        if args.prompt_tail:
            prompt_tail(m, workload, int(item), args.tokens)
        else:
            measure(m, workload, int(item), args.tokens)


if __name__ == "__main__":
    main()
