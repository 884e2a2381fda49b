"""Seed 002's soft idle, measured: what a downsize frees and what a restore costs.

    .venv/bin/python bench/bench_memory.py [--rounds 5] [--ctx 8192] [--prompt-words 900]

A router on a fresh home serves SmolLM2 with `--ctx` context and seed 002's memory
management on. Each round:

1. a session reads a long story (`--prompt-words`) and answers; RSS of the backend
   ("loaded");
2. the model goes idle past its `downsize_idle_timeout` and frees its contexts; RSS
   ("downsized");
3. the session's next turn: the backend makes its context again and copies the
   session's KV back in. Its time to first token is "TTFT restored"; the backend's own
   figure for making the context is "restore"; RSS ("restored");
4. the baseline: a full reload (unload + load, the other way to get the memory back)
   is "reload", and a fresh session that must prefill the whole conversation again is
   "TTFT re-prefill".

The two orders alternate between rounds (restore first, then reload first) and the
ratios restore / reload and TTFT restored / TTFT re-prefill are printed per round with
their medians. Goal (issue 11): restore <= 0.2x reload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import httpx
from harness import ADMIN, SMOL, Router

STORY = (
    "The lighthouse keeper climbed the stairs every evening, counting each step, "
    "listening to the sea and writing down the colour of the sky in a small book. "
)


def backend(router: Router) -> dict[str, Any]:
    return next(m for m in router.health()["all_models_loaded"] if m["model_name"] == SMOL)


def wait_status(router: Router, wanted: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = backend(router)
        if entry["status"] == wanted:
            return entry
        time.sleep(0.05)
    raise RuntimeError(f"{SMOL} never became {wanted}")


def turn(c: httpx.Client, sid: str, text: str, n: int = 8) -> tuple[float, str]:
    """(seconds from sending the input to the first token, the answer)."""
    t0 = time.perf_counter()
    r = c.post(f"/api/v1/sessions/{sid}/input", json={"text": text})
    r.raise_for_status()
    first = 0.0
    parts = []
    body = {"max_new_tokens": n, "temperature": 0}
    with c.stream("POST", f"/api/v1/sessions/{sid}/generate", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                if "text" in event and not first:
                    first = time.perf_counter() - t0
                parts.append(event.get("text", ""))
    return first, "".join(parts)


def new_session(c: httpx.Client) -> str:
    sid: str = c.post("/api/v1/sessions", json={"model": SMOL}).json()["session_id"]
    return sid


def restore_path(router: Router, c: httpx.Client, sid: str, out: dict[str, float]) -> None:
    wait_status(router, "downsized")
    out["rss_downsized"] = backend(router)["memory"]["rss_bytes"]
    out["ttft_restored"], _ = turn(c, sid, " What colour was the sky?")
    out["restore_ms"] = backend_restore_ms(router)
    out["rss_restored"] = backend(router)["memory"]["rss_bytes"]


def backend_restore_ms(router: Router) -> float:
    url = backend(router)["backend_url"]
    return float(httpx.get(url + "/health", timeout=10).json()["memory"]["last_restore_ms"])


def reload_path(c: httpx.Client, load: dict[str, Any], text: str, out: dict[str, float]) -> None:
    t0 = time.perf_counter()
    c.post("/api/v1/unload", json={"model_name": SMOL}).raise_for_status()
    c.post("/api/v1/load", json=load).raise_for_status()
    out["reload_ms"] = (time.perf_counter() - t0) * 1000
    fresh = new_session(c)
    out["ttft_reprefill"], _ = turn(c, fresh, text + " What colour was the sky?")
    c.delete(f"/api/v1/sessions/{fresh}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--prompt-words", type=int, default=900)
    args = ap.parse_args()
    words = STORY.split()
    text = " ".join(words[i % len(words)] for i in range(args.prompt_words))
    load = {
        "model_name": SMOL,
        "ctx_size": args.ctx,
        "auto_evict": True,
        "downsize_idle_timeout": 1,
        "evict_idle_timeout": 3600,
    }
    router = Router.start("--model", "", "--threads", "2")
    rows: list[dict[str, float]] = []
    try:
        with httpx.Client(base_url=router.base_url, headers=ADMIN, timeout=300) as c:
            for i in range(args.rounds):
                c.post("/api/v1/load", json=load).raise_for_status()
                sid = new_session(c)
                turn(c, sid, text)
                row: dict[str, float] = {"rss_loaded": backend(router)["memory"]["rss_bytes"]}
                if i % 2 == 0:
                    restore_path(router, c, sid, row)
                    reload_path(c, load, text, row)
                else:
                    reload_path(c, load, text, row)  # the session died with its backend:
                    sid = new_session(c)  # start it again and let it go idle
                    turn(c, sid, text)
                    row["rss_loaded"] = backend(router)["memory"]["rss_bytes"]
                    restore_path(router, c, sid, row)
                c.delete(f"/api/v1/sessions/{sid}")
                rows.append(row)
                print(
                    f"round {i + 1}: RSS loaded {row['rss_loaded'] / 2**20:.0f} MiB, "
                    f"downsized {row['rss_downsized'] / 2**20:.0f} MiB, "
                    f"restored {row['rss_restored'] / 2**20:.0f} MiB; "
                    f"restore {row['restore_ms']:.0f} ms vs reload {row['reload_ms']:.0f} ms "
                    f"= {row['restore_ms'] / row['reload_ms']:.3f}x; "
                    f"TTFT restored {row['ttft_restored'] * 1000:.0f} ms vs re-prefill "
                    f"{row['ttft_reprefill'] * 1000:.0f} ms "
                    f"= {row['ttft_restored'] / row['ttft_reprefill']:.3f}x",
                    flush=True,
                )
    finally:
        router.stop()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    restore = statistics.median(r["restore_ms"] / r["reload_ms"] for r in rows)
    ttft = statistics.median(r["ttft_restored"] / r["ttft_reprefill"] for r in rows)
    print(
        f"median over {len(rows)} rounds (ctx {args.ctx}, {args.prompt_words}-word story): "
        f"RSS loaded {med('rss_loaded') / 2**20:.0f} MiB / downsized "
        f"{med('rss_downsized') / 2**20:.0f} MiB / restored {med('rss_restored') / 2**20:.0f} MiB; "
        f"restore/reload {restore:.3f}x (goal <= 0.2x); TTFT restored/re-prefill {ttft:.3f}x"
    )
    return 0 if restore <= 0.2 else 1


if __name__ == "__main__":
    sys.exit(main())
