"""Issue 47: throughput where the server, not the model, is the limit.

    .venv/bin/python bench/bench_host.py [--rounds 3] [--levels 1,8,32,64] [--new 64]
        [--modes plain,sse] [--direct] [--model tiny|smol] [--model-path GGUF]
        [--target TOKENS] [--profile DIR]

A tiny random-weight llama (2 layers, 64 wide, F32, SmolLM2's tokenizer and template,
`random_gguf.tiny_host_bound`) decodes 64 rows in about a millisecond on 2 cores, so
each server's own work (batching, sampling, detokenizing, streaming, HTTP) decides how
fast it is. Juggler (`juggler serve`, the model registered and loaded with
`--parallel 64`, everything else its defaults) against llama.cpp's `llama-server`
(`-np 64 -kvu -t 2 -tb 2`, built by bench/build_llamacpp.sh from the same llama.cpp),
at 1, 8, 32 and 64 concurrent streams, non-streamed (`plain`) and streamed (`sse`):
`/v1/completions`, fresh prompts, `--new` tokens a request (`ignore_eos`), T=0.8 with
llama.cpp's default top_k 40, top_p 0.95, min_p 0.05. `--direct` adds Juggler's backend
process called straight (no router). `--model smol` runs the packaged SmolLM2 instead
(where the model is the bottleneck).

Runs are interleaved (the servers' order flips every round) and each ratio is the
median of per-round ratios. A burst is at least `--target` tokens (16,384 on the tiny
model: shorter bursts, about a second at 8 streams, swung from round to round). Each
burst also reports every server process's CPU time per generated token (router, backend,
llama-server), and the load generator's own (`loadgen.py`, in this process): where the
per-token budget goes, by process.

`--profile DIR` samples the backend and the router with py-spy during one burst at
the lowest and highest level and prints the share of each part of Juggler's
per-token work (see `profile_parts`); the raw stacks stay in DIR. `--profile-of
baseline` (with `--baseline DIR`) profiles the other checkout instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import (
    BIN,
    Server,
    completion_body,
    cpu_seconds,
    free_port,
    fresh_prompt,
    settle,
    smol_path,
    start,
    wait_ready,
)
from loadgen import run_burst
from random_gguf import tiny_host_bound

ADMIN = "bench-host-admin"
NAME = "user.host-bench"
CTX = 8192
#: Tokens a burst at least, on the tiny model: about 3 s at 8 streams and more, 9 s at 1.
#: Bursts of 4,096 (about a second there) swung between two levels from round to round
#: for the same code (8 streams non-streamed: about 4,000 or 5,300 tokens a second).
TINY_TARGET = 16384
#: On a model that decides its own speed (SmolLM2: about 100 tokens a second alone).
OTHER_TARGET = 4096
PARALLEL = 64


@dataclass
class System:
    """One server under test: the URL its clients use, and the processes it runs."""

    name: str
    url: str
    model_field: str
    servers: list[Server]
    #: Process label -> pid, for the CPU accounting.
    pids: dict[str, int] = field(default_factory=dict)
    #: Its home folder, removed when it stops.
    home: Path | None = None

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def start_llama(model: Path, parallel: int, ctx: int, extra: str = "") -> System | None:
    exe = BIN / "llama-server"
    if not exe.exists():
        print(f"({exe} missing: run bench/build_llamacpp.sh)")
        return None
    port = free_port()
    cmd = [
        str(exe), "-m", str(model), "-t", "2", "-tb", "2", "-np", str(parallel),
        "-c", str(ctx), "-kvu", "--host", "127.0.0.1", "--port", str(port), *extra.split(),
    ]  # fmt: skip
    proc, log = start(cmd, "llama-server")
    s = Server("llama-server", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/health", lambda r: r.status_code == 200)
    return System("llama-server", s.url, "tiny", [s], {"llama-server": proc.pid})


def start_router(
    model: Path,
    parallel: int,
    ctx: int,
    extra: str = "",
    name: str = "juggler",
    tree: Path | None = None,
) -> System:
    home = Path(tempfile.mkdtemp(prefix="bench-host-"))
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler", "serve", "--port", str(port), "--model", "",
        "--admin-api-key", ADMIN, "--log-level", "warning",
    ]  # fmt: skip
    env = {"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    if tree is not None:
        # Another checkout's juggler package: `python -m` puts the working folder first on
        # sys.path (ahead of PYTHONPATH), and the router's backends inherit the folder.
        env["PYTHONPATH"] = str(tree)
    proc, log = start(cmd, "router", env, cwd=tree)
    s = Server("juggler", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/live", lambda r: r.status_code == 200)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=s.url, headers=admin, timeout=300) as c:
        pull = {"model_name": NAME, "checkpoint": str(model), "recipe": "llamacpp"}
        r = c.post("/api/v1/pull", json=pull)
        assert r.status_code == 200, r.text
        args = f"--parallel {parallel} {extra}".strip()
        # llama-server's `-c ctx -np N -kvu`: ctx cells shared by the sequences, each of
        # which holds a short prompt and its answer (issue 48: ctx_size and kv_cells).
        load = {"model_name": NAME, "ctx_size": min(ctx, 2048), "kv_cells": ctx}
        load["llamacpp_args"] = args
        r = c.post("/api/v1/load", json=load)
        if r.status_code == 400 and r.json()["error"].get("param") == "kv_cells":
            # A checkout before kv_cells: its ctx_size was a worker's cells.
            load = {"model_name": NAME, "ctx_size": ctx, "llamacpp_args": args}
            r = c.post("/api/v1/load", json=load)
        assert r.status_code == 200, r.text
        health = c.get("/api/v1/health").json()
    backend = next(int(m["pid"]) for m in health["all_models_loaded"] if m.get("pid"))
    if tree is not None:
        for pid in (proc.pid, backend):
            ran = Path(f"/proc/{pid}/cwd").resolve()
            assert ran == tree, f"{name}: process {pid} runs in {ran}, not {tree}"
    # The home stays while the router runs: it reads its model list and aliases there.
    return System(name, s.url, NAME, [s], {"router": proc.pid, "backend": backend}, home)


def start_direct(model: Path, parallel: int, ctx: int, extra: str = "") -> System:
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(model),
        "--model-name", "tiny", "--port", str(port), "--parallel", str(parallel),
        "--ctx-size", str(ctx), "--log-level", "warning", *extra.split(),
    ]  # fmt: skip
    proc, log = start(cmd, "backend")
    s = Server("juggler-direct", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/health", lambda r: r.status_code == 200)
    return System("direct", s.url, "tiny", [s], {"backend": proc.pid})


def bodies(
    level: int,
    n_new: int,
    stream: bool,
    model_field: str,
    rng: random.Random,
    target: int,
    sampling: dict[str, Any] | None = None,
) -> list[list[dict[str, Any]]]:
    per_stream = max(2, math.ceil(target / (level * n_new)))
    out = []
    for _ in range(level):
        mine = []
        for _ in range(per_stream):
            body = completion_body(model_field, fresh_prompt(rng), n_new) | (sampling or {})
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            mine.append(body)
        out.append(mine)
    return out


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Measured:
    tps: float
    #: CPU microseconds per generated token, by process label (and "client").
    cpu_us: dict[str, float]
    tokens: int = 0


def burst(
    system: System,
    level: int,
    n_new: int,
    stream: bool,
    seed: int,
    target: int,
    sampling: dict[str, Any] | None = None,
) -> Measured:
    rng = random.Random(seed)
    work = bodies(level, n_new, stream, system.model_field, rng, target, sampling)
    before = {k: cpu_seconds(p) for k, p in system.pids.items()}
    mine = own_cpu_s()
    result = run_burst(system.url, "/v1/completions", work)
    cpu = {k: cpu_seconds(p) - before[k] for k, p in system.pids.items()}
    cpu["client"] = own_cpu_s() - mine
    settle()
    n = max(1, result.tokens)
    expected = sum(len(m) for m in work) * n_new
    if result.tokens != expected:
        print(f"  ({system.name}: {result.tokens} tokens, expected {expected})")
    return Measured(result.tps, {k: v / n * 1e6 for k, v in cpu.items()}, result.tokens)


# -- profile ---------------------------------------------------------------------------
#: The parts of Juggler's per-token work, each recognised by a frame of its stack (the
#: first part, in this order, whose marker appears in a sample's stack takes it).
PROFILE_PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("decode (llama_decode)", ("decode (juggler/engine/llama/native_context.py",)),
    ("sampling", ("native_sampler.py", "top_k.py")),
    ("detokenize + stop strings", ("piece (", "sampling.py", "utf8", "StopMatcher")),
    (
        "plan + batch fill",
        (
            "schedule/batch.py",
            "_fill (",
            "drafts.py",
            "draft_length.py",
            "decode_cost.py",
            "survival.py",
            "make_room",
        ),
    ),
    ("tokens to streams", ("on_token (", "on_rows (", "stream.py", "outbox.py")),
    ("worker loop (other)", ("engine/worker/",)),
    ("backend HTTP + JSON", ("engine/http/", "api/sse.py", "uvicorn", "starlette", "json")),
    ("event loop + other", ("",)),
    # Every sample of the router process (`profile_parts(..., router=True)`).
    ("router (its whole process)", ()),
]


#: py-spy's samples a second.
RATE = 200


def profile_parts(raw: Path, *, router: bool = False) -> Counter[str]:
    """Samples per part, from py-spy's `--format raw` output (collapsed stacks); every
    sample of the router's process is the router's."""
    parts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        if router:
            parts[PROFILE_PARTS[-1][0]] += int(count)
            continue
        for name, markers in PROFILE_PARTS:
            if any(m in stack for m in markers):
                parts[name] += int(count)
                break
    return parts


def profile(
    system: System, level: int, n_new: int, stream: bool, out_dir: Path, target: int
) -> None:
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        print("(py-spy is not installed: make install puts it in .venv)")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    files = {}
    for label, pid in system.pids.items():
        files[label] = out_dir / f"{system.name}-{label}-{level}{'-sse' if stream else ''}.txt"
        cmd = [spy, "record", "--format", "raw", "--rate", str(RATE), "--nonblocking"]
        cmd += ["--pid", str(pid), "-o", str(files[label])]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)  # py-spy attaches
    m = burst(system, level, n_new, stream, 99, target)
    for p in procs:
        p.send_signal(2)
        p.wait(timeout=60)
    total: Counter[str] = Counter()
    for label, f in files.items():
        if f.exists():
            total.update(profile_parts(f, router=label == "router"))
    n = sum(total.values()) or 1
    kind = "sse" if stream else "plain"
    print(f"\nprofile: {system.name} at {level} streams ({kind}), {m.tps:.0f} tok/s")
    print(
        f"  {'part':<28} {'share':>6} {'us/token':>9}  (time a thread spent there, holding "
        f"the GIL or waiting for it, py-spy at {RATE} Hz)"
    )
    tokens = max(1, m.tokens)
    for name, _ in PROFILE_PARTS:
        us = total[name] / RATE / tokens * 1e6
        print(f"  {name:<28} {100 * total[name] / n:5.1f}% {us:9.0f}")
    print("  CPU us/token: " + ", ".join(f"{k} {v:.0f}" for k, v in m.cpu_us.items()))


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--new", type=int, default=64, help="tokens a request")
    ap.add_argument(
        "--sampling",
        type=json.loads,
        default=None,
        help="JSON merged into every request body, e.g. '{\"temperature\": 0}' or "
        "'{\"repeat_penalty\": 1.1}' (default: T=0.8, top_k 40, top_p 0.95, min_p 0.05)",
    )
    ap.add_argument("--modes", default="plain,sse")
    ap.add_argument("--direct", action="store_true", help="also the backend without the router")
    ap.add_argument("--no-llama", action="store_true", help="leave llama-server out")
    ap.add_argument("--llama-args", default="", help="more llama-server flags")
    ap.add_argument("--no-juggler", action="store_true", help="leave Juggler's router out")
    ap.add_argument("--engine-args", default="", help="more engine flags for Juggler")
    ap.add_argument(
        "--vs-args",
        default=None,
        help="also a second Juggler router with these engine flags instead (A/B)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="also Juggler from another checkout (e.g. a git worktree of an older commit)",
    )
    ap.add_argument("--model", choices=["tiny", "smol"], default="tiny")
    ap.add_argument("--model-path", type=Path, default=None, help="this GGUF instead")
    ap.add_argument(
        "--target",
        type=int,
        default=None,
        help=f"tokens a burst, at least (default {TINY_TARGET:,} on the tiny model, "
        f"{OTHER_TARGET:,} on another)",
    )
    ap.add_argument("--parallel", type=int, default=PARALLEL)
    ap.add_argument("--profile", type=Path, default=None, help="py-spy profiles into DIR")
    ap.add_argument(
        "--profile-of", default="juggler", help="the system profiled: juggler or baseline"
    )
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    model = args.model_path or (tiny_host_bound() if args.model == "tiny" else smol_path())
    if args.target is None:
        tiny = args.model_path is None and args.model == "tiny"
        args.target = TINY_TARGET if tiny else OTHER_TARGET
    print(f"model: {model} ({model.stat().st_size / 1e6:.0f} MB)")

    systems: list[System] = []
    try:
        starters: list[Callable[[], System | None]] = []
        if not args.no_juggler:
            starters.append(lambda: start_router(model, args.parallel, CTX, args.engine_args))
        if args.vs_args is not None:
            starters.append(
                lambda: start_router(model, args.parallel, CTX, args.vs_args, "juggler-B")
            )
        if args.baseline is not None:
            starters.append(
                lambda: start_router(
                    model, args.parallel, CTX, "", "baseline", args.baseline.resolve()
                )
            )
        if args.direct:
            starters.append(lambda: start_direct(model, args.parallel, CTX, args.engine_args))
        if not args.no_llama:
            starters.append(lambda: start_llama(model, args.parallel, CTX, args.llama_args))
        for make in starters:
            s = make()
            if s is not None:
                systems.append(s)
        for s in systems:  # warm-up, not counted
            burst(s, 8, args.new, False, 0, 512)
        if args.profile is not None:
            target = next(s for s in systems if s.name == args.profile_of)
            for level in (min(levels), max(levels)):
                for mode in modes:
                    profile(target, level, args.new, mode == "sse", args.profile, args.target)
            return
        # tps[(system, level, mode)] -> per-round figures
        tps: dict[tuple[str, int, str], list[float]] = {}
        cpu: dict[tuple[str, int, str], list[dict[str, float]]] = {}
        for rnd in range(args.rounds):
            order = systems if rnd % 2 == 0 else systems[::-1]
            for level in levels:
                for mode in modes:
                    seed = rnd * 1000 + level
                    line = []
                    for s in order:
                        m = burst(
                            s, level, args.new, mode == "sse", seed, args.target, args.sampling
                        )
                        tps.setdefault((s.name, level, mode), []).append(m.tps)
                        cpu.setdefault((s.name, level, mode), []).append(m.cpu_us)
                        line.append(f"{s.name} {m.tps:7.0f}")
                    print(f"round {rnd + 1} {level:>3} streams {mode:<5}: " + "  ".join(line))
        report(systems, levels, modes, tps, cpu)
    finally:
        for s in systems:
            s.stop()


def report(
    systems: list[System],
    levels: list[int],
    modes: list[str],
    tps: dict[tuple[str, int, str], list[float]],
    cpu: dict[tuple[str, int, str], list[dict[str, float]]],
) -> None:
    names = [s.name for s in systems]
    # Juggler alone (no llama-server built, no baseline): its medians without ratios.
    refs: list[str | None] = [r for r in ("llama-server", "baseline") if r in names] or [None]
    for ref in refs:
        against = f" (and the median of per-round ratios against {ref})" if ref else ""
        print(f"\nmedian tok/s{against}")
        print(f"{'streams':>8} {'mode':<6}" + "".join(f"{n:>16}" for n in names))
        for level in levels:
            for mode in modes:
                row = f"{level:>8} {mode:<6}"
                for n in names:
                    xs = tps[(n, level, mode)]
                    cell = f"{med(xs):.0f}"
                    if ref is not None and n != ref:
                        base = tps[(ref, level, mode)]
                        cell += f" ({med([a / b for a, b in zip(xs, base, strict=True)]):.2f}x)"
                    row += f"{cell:>16}"
                print(row)
    print("\nCPU microseconds per generated token, by process (medians)")
    for level in levels:
        for mode in modes:
            for n in names:
                rows = cpu[(n, level, mode)]
                keys = rows[0].keys()
                parts = ", ".join(f"{k} {med([r[k] for r in rows]):.0f}" for k in keys)
                print(f"{level:>8} {mode:<6} {n:<14} {parts}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
