"""Continuous batching: concurrent sessions match a lone run; many streams finish right."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from juggler.engine.schedule.ties import TILED_NEAR_TIE
from tests.engine.conftest import Backend, start_backend

pytestmark = pytest.mark.slow

PROMPTS = [
    "The history of the city of Rome begins",
    "def fibonacci(n):\n    ",
    "My favourite recipe for pancakes is",
    "The three laws of motion state that",
    "Once upon a time, in a small village,",
    "The capital cities of Europe include",
    "To install Python on Linux, first",
    "A haiku about the autumn moon:\n",
]
N_NEW = 24


class LoneLlama:
    """Greedy continuations from llama-cpp-python's `Llama`, one prompt at a time, with
    how far each token's logit led the next best.

    Flash attention is on, as in the engine (llama.cpp's "auto" turns it on for CPU):
    `Llama` defaults to off, and that alone changes the logits enough to flip a greedy
    choice (measured: "def fibonacci(n):" continues with " fib" with it, " def" without).
    """

    def __init__(self, model: Path) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            str(model), n_ctx=512, n_threads=1, verbose=False, flash_attn=True, logits_all=True
        )

    def greedy(self, prompt: str, n: int) -> tuple[list[int], list[float]]:
        """The tokens, and each one's lead over the next best logit."""
        llm = self.llm
        llm.reset()
        llm.eval(llm.tokenize(prompt.encode(), add_bos=True, special=True))
        out: list[int] = []
        leads: list[float] = []
        while len(out) < n:
            logits = llm.scores[llm.n_tokens - 1]
            t = int(logits.argmax())
            if t == llm.token_eos():
                break
            others = np.delete(logits, t)
            out.append(t)
            leads.append(float(logits[t] - others.max()))
            llm.eval([t])
        return out, leads

    def close(self) -> None:
        self.llm.close()


def session_tokens(url: str, prompt: str, n: int) -> list[int]:
    with httpx.Client(base_url=url, timeout=120) as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/input", json={"text": prompt})
        ids: list[int] = []
        with c.stream(
            "POST", f"/v1/sessions/{sid}/generate", json={"max_new_tokens": n, "temperature": 0}
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and '"token_ids"' in line:
                    ids.extend(json.loads(line[6:])["token_ids"])
        c.delete(f"/v1/sessions/{sid}")
        return ids


def test_greedy_output_among_8_sessions_equals_a_lone_llama_run(
    smol_path: Path, log_dir: Path
) -> None:
    """Batching does not change a greedy answer, but where a near-tie goes the other
    way: llama.cpp's rounding depends on a decode's shape (`schedule.ties`: one row, 2
    to 63 rows, a tiled path from 64; eight short prompts prefilled together make a
    decode of 64 rows or more). So each batched answer equals the lone one up to its
    end, or up to a token whose logit led the next best by less than `TILED_NEAR_TIE`
    in the lone run, where it may part (seen in CI at token 23 of "Once upon a time"
    and of "The history of the city of Rome begins"). A sequence mixed up with another
    parts at once, at a token the model was sure of. Speculation is off here."""
    backend = start_backend(
        smol_path, "smol", log_dir, "--parallel", "16", "--ctx-size", "2048", "--speculative", "off"
    )
    try:
        with ThreadPoolExecutor(8) as pool:
            batched = list(pool.map(lambda p: session_tokens(backend.url, p, N_NEW), PROMPTS))
    finally:
        backend.stop()
    lone = LoneLlama(smol_path)
    try:
        same = 0
        for prompt, got in zip(PROMPTS, batched, strict=True):
            expected, leads = lone.greedy(prompt, N_NEW)
            assert len(got) >= len(expected), prompt
            pairs = zip(got[: len(expected)], expected, strict=True)
            part = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
            if part is None:
                same += 1
                continue
            assert part > 0 and leads[part] < TILED_NEAR_TIE, (prompt, part, leads[part])
        assert same >= len(PROMPTS) // 2  # near-ties are rare: most answers are equal
    finally:
        lone.close()


def stream_completion(url: str, i: int) -> dict[str, Any]:
    req = {
        "prompt": f"Story number {i}: Long ago,",
        "max_tokens": 6 + i,
        "temperature": 0.9,
        "seed": i,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = 0
    finish = None
    usage: dict[str, Any] = {}
    done = False
    with (
        httpx.Client(base_url=url, timeout=180) as c,
        c.stream("POST", "/v1/completions", json=req) as r,
    ):
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                obj = json.loads(line[6:])
                assert "error" not in obj, obj
                if obj.get("usage"):
                    usage = obj["usage"]
                elif obj["choices"][0]["finish_reason"]:
                    finish = obj["choices"][0]["finish_reason"]
                else:
                    chunks += 1
    return {"i": i, "max": 6 + i, "chunks": chunks, "finish": finish, "usage": usage, "done": done}


def test_16_concurrent_streams_finish_with_right_counts(smol_backend: Backend) -> None:
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: stream_completion(smol_backend.url, i), range(16)))
    for r in results:
        assert r["done"], r
        n = r["usage"]["completion_tokens"]
        assert 1 <= n <= r["max"], r
        assert r["chunks"] <= n
        assert r["finish"] == ("length" if n == r["max"] else "stop"), r
    assert sum(r["finish"] == "length" for r in results) >= 8


def test_two_workers_place_sessions_on_both(smol_path: Path, log_dir: Path) -> None:
    from tests.engine.conftest import start_backend

    b = start_backend(
        smol_path,
        "smol2w",
        log_dir,
        "--workers",
        "2",
        "--parallel",
        "2",
        "--threads",
        "1",
        "--ctx-size",
        "1024",
    )
    try:
        with b.client() as c:
            assert c.get("/health").json()["workers"] == 2
            sids = [c.post("/v1/sessions", json={}).json()["session_id"] for _ in range(4)]
            # Two workers x two sequences, all held: a fifth session parks the least
            # recently used idle one (issue 10: idle sessions never make others wait).
            assert c.get("/stats").json()["parked_sessions"] == 0
            r = c.post("/v1/sessions", json={})
            assert r.status_code == 200, r.text
            # The worker answers, then publishes its counts at the end of that step (a
            # moment later on a busy machine): wait for them, do not read them at once.
            deadline = time.monotonic() + 60
            while c.get("/stats").json()["parked_sessions"] != 1:
                assert time.monotonic() < deadline, "a fifth session parked no idle one"
                time.sleep(0.02)  # polling interval
            assert c.delete(f"/v1/sessions/{r.json()['session_id']}").status_code == 200
            for sid in sids:
                c.post(f"/v1/sessions/{sid}/input", json={"text": "Hello there"})
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda s: _gen_ids(b.url, s), sids))
        assert all(len(o) == 4 for o in outs)
        assert outs[0] == outs[1] == outs[2] == outs[3]  # same input, greedy
        with b.client() as c:
            for sid in sids:
                assert c.delete(f"/v1/sessions/{sid}").status_code == 200
    finally:
        b.stop()


def _gen_ids(url: str, sid: str) -> list[int]:
    ids: list[int] = []
    with (
        httpx.Client(base_url=url, timeout=120) as c,
        c.stream(
            "POST", f"/v1/sessions/{sid}/generate", json={"max_new_tokens": 4, "temperature": 0}
        ) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: {") and '"token_ids"' in line:
                ids.extend(json.loads(line[6:])["token_ids"])
    return ids
