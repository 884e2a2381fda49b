"""Speculative decoding on grounded work (issues 16 and 23): Juggler with and without
prompt-lookup drafts, and llama.cpp's own server plain and with its n-gram speculation.

    bench/build_llamacpp.sh            # once: llama-server from the same llama.cpp
    .venv/bin/python bench/bench_spec.py [--rounds 3] [--levels 1,8] [--tokens 160]
        [--workloads quote,records,json,table,code,story] [--llama-spec ngram-mod,ngram-map-k]
        [--fresh]

Workloads (chat, greedy, `--tokens` new tokens a request): see `spec_workloads.py`.
Grounded ones copy from their prompt (a paragraph, a record, a JSON object, table rows,
a file with one name changed); `story` is open-ended, the control. At N streams each
stream asks its own variant (another paragraph, another record, another name).

Servers, all started once and measured in interleaved order every round; every burst
runs twice and only the second counts, so each server has the prompts cached and the
figure is generation, not prefill (the servers' prompt caches are equally good):
  juggler      the backend (`python -m juggler.engine`), requests with speculative=false
  juggler+spec the same backend, requests with speculative=true (the default)
  llama        llama-server -np 8 -kvu, no speculation
  llama+<type> llama-server with `--spec-type <type>` for each `--llama-spec` type
The measured burst repeats the request its warm-up burst (and earlier rounds) asked, so
a server that remembers earlier answers drafts from them: llama-server's ngram-mod keeps
its n-gram table across requests (Juggler drafts from each sequence's own text only).
With `--fresh` every burst of a round asks about another item (another paragraph,
record, name) than any burst before it on that server, so only the shared document is
cached and no answer was given before (and speculation gets a backend of its own).
Each figure is generated tokens over the burst's wall time. Printed: every round, the
median tokens/s, and the medians of per-round ratios that issue 23's goals name
(Juggler with speculation against llama-server's best configuration, Juggler without it
against llama-server plain). Never part of the tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from bench_engine import BIN, Server, free_port, settle, smol_path, start, wait_ready
from spec_workloads import GROUNDED, WORKLOADS, messages

ROOT = Path(__file__).resolve().parent.parent
CTX = 16384


def start_backend() -> Server:
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(smol_path()),
        "--model-name", "smol", "--port", str(port), "--threads", "2", "--parallel", "8",
        "--ctx-size", str(CTX), "--cache-cells", str(CTX),
    ]  # fmt: skip
    proc, log = start(cmd, "spec-juggler", {"PYTHONPATH": str(ROOT)})
    server = Server("juggler", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def start_llama(spec: str | None) -> Server | None:
    exe = BIN / "llama-server"
    if not exe.exists():
        return None
    port = free_port()
    cmd = [
        str(exe), "-m", str(smol_path()), "-t", "2", "-tb", "2", "-np", "8", "-c", str(CTX),
        "-kvu", "--host", "127.0.0.1", "--port", str(port),
        *(["--spec-type", spec] if spec else []),
    ]  # fmt: skip
    proc, log = start(cmd, f"spec-llama-{spec or 'plain'}")
    server = Server(
        f"llama+{spec}" if spec else "llama", proc, f"http://127.0.0.1:{port}", None, log
    )
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def burst(
    url: str,
    workload: str,
    streams: int,
    tokens: int,
    extra: dict[str, Any],
    first: int = 0,
    latencies: list[float] | None = None,
) -> tuple[float, list[str]]:
    """Tokens a second of `streams` requests at once, stream i asking item `first + i`,
    and the answers (each request's seconds from the burst's start to its answer are
    appended to `latencies`, when given)."""
    t0 = time.perf_counter()

    def one(i: int) -> tuple[int, str]:
        body = {
            "model": "smol",
            "messages": messages(workload, first + i),
            "max_tokens": tokens,
            "temperature": 0,
            **extra,
        }
        with httpx.Client(timeout=900) as c:
            r = c.post(url + "/v1/chat/completions", json=body)
            r.raise_for_status()
            data = r.json()
        if latencies is not None:
            latencies.append(time.perf_counter() - t0)
        return int(data["usage"]["completion_tokens"]), data["choices"][0]["message"]["content"]

    with ThreadPoolExecutor(streams) as pool:
        answers = list(pool.map(one, range(streams)))
    tps = sum(n for n, _ in answers) / (time.perf_counter() - t0)
    settle()
    return tps, [text for _, text in answers]


def agreement(texts: list[str], reference: list[str]) -> float:
    """How much of the reference answers `texts` repeat before they part, 0 to 1: servers
    whose greedy answers part early generated different text, so their tokens a second
    are not the same work (llama.cpp's rounding differs by batch shape, and a near-tie
    of a small model goes either way)."""
    shares = []
    for a, b in zip(texts, reference, strict=True):
        if a == b:
            shares.append(1.0)
            continue
        common = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        shares.append(min(common / max(len(b), 1), 0.99))
    return sum(shares) / max(len(shares), 1)


def spec_counts(server: Server) -> tuple[int, int, int]:
    """Juggler's draft tokens decoded and kept, and its decodes, so far."""
    stats = httpx.get(server.url + "/stats", timeout=30).json()
    return (
        int(stats["spec_draft_tokens_total"]),
        int(stats["spec_accepted_tokens_total"]),
        int(stats["decode_calls_total"]),
    )


def llama_version() -> str:
    exe = BIN / "llama-server"
    if not exe.exists():
        return "not built (bench/build_llamacpp.sh)"
    import subprocess

    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    return " ".join((out.stdout + out.stderr).split()[-9:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--levels", default="1,8")
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--llama-spec", default="ngram-mod")
    p.add_argument("--fresh", action="store_true", help="never ask a request again")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    workloads = args.workloads.split(",")
    print(f"llama-server: {llama_version()}", flush=True)
    juggler = start_backend()
    # --fresh: a backend of its own for speculation, sharing no state with the requests
    # without it.
    juggler_spec = start_backend() if args.fresh else juggler
    servers: dict[str, tuple[Server, dict[str, Any]]] = {
        "juggler": (juggler, {"speculative": False}),
        "juggler+spec": (juggler_spec, {"speculative": True}),
    }
    started = [juggler] if juggler_spec is juggler else [juggler, juggler_spec]
    try:
        for spec in [None, *[s for s in args.llama_spec.split(",") if s]]:
            server = start_llama(spec)
            if server is not None:
                started.append(server)
                servers[server.name] = (server, {})
        results: dict[tuple[str, int, str], list[float]] = defaultdict(list)
        names = list(servers)
        for r in range(1, args.rounds + 1):
            for w in workloads:
                for n in levels:
                    order = names[r % len(names) :] + names[: r % len(names)]
                    row = []
                    answers: dict[str, list[str]] = {}
                    # --fresh: round r's bursts ask items 2rn.. and (2r+1)n.., new ones
                    warm, measured = (2 * r * n, (2 * r + 1) * n) if args.fresh else (0, 0)
                    for name in order:
                        server, extra = servers[name]
                        # caches the prompts (with --fresh, the shared document only)
                        burst(server.url, w, n, args.tokens, extra, warm)
                        before = spec_counts(server) if name == "juggler+spec" else None
                        tps, answers[name] = burst(server.url, w, n, args.tokens, extra, measured)
                        results[(w, n, name)].append(tps)
                        row.append(f"{name} {tps:6.1f}")
                        if before is not None:
                            drafted, kept, decodes = (
                                a - b for a, b in zip(spec_counts(server), before, strict=True)
                            )
                            row.append(f"(drafted {drafted}, kept {kept}, {decodes} decodes)")
                    ref = "llama" if "llama" in answers else "juggler"
                    same = {x: agreement(t, answers[ref]) for x, t in answers.items() if x != ref}
                    parted = [f"{x} {share:.0%}" for x, share in same.items() if share < 1.0]
                    if parted:
                        row.append(f"[same text as {ref}: " + ", ".join(parted) + "]")
                    print(f"round {r} {w:5s} x{n}: " + "  ".join(row), flush=True)
        report(results, workloads, levels, names)
    finally:
        for s in started:
            s.stop()


def report(
    results: dict[tuple[str, int, str], list[float]],
    workloads: list[str],
    levels: list[int],
    names: list[str],
) -> None:
    def ratio(w: str, n: int, a: str, b: str) -> float | None:
        xs, ys = results.get((w, n, a)), results.get((w, n, b))
        if not xs or not ys:
            return None
        return statistics.median(x / y for x, y in zip(xs, ys, strict=True))

    print("\nmedian tokens/s:")
    for w in workloads:
        for n in levels:
            cells = [f"{name} {statistics.median(results[(w, n, name)]):6.1f}" for name in names]
            print(f"  {w:5s} x{n}: " + "  ".join(cells))
    # llama-server's best configuration, plain included (on open-ended text plain may win).
    llamas = [x for x in names if x == "llama" or x.startswith("llama+")]
    print("\nmedian of per-round ratios:")
    for w in workloads:
        for n in levels:
            kind = "grounded" if w in GROUNDED else "open"
            parts = [f"{kind:8s} spec/no-spec {ratio(w, n, 'juggler+spec', 'juggler'):.2f}x"]
            if "llama" in names:
                parts.append(f"no-spec/llama {ratio(w, n, 'juggler', 'llama'):.2f}x")
            if llamas:
                best = max(llamas, key=lambda x: statistics.median(results[(w, n, x)]))
                parts.append(f"spec/{best} (best) {ratio(w, n, 'juggler+spec', best):.2f}x")
            print(f"  {w:5s} x{n}: " + "   ".join(parts))


if __name__ == "__main__":
    main()
