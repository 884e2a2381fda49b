"""Issue 47: where a lone stream's time goes, hop by hop.

    .venv/bin/python bench/bench_hop.py [--rounds 6] [--requests 20] [--new 64]
        [--model-path GGUF]

One client sends one request at a time (`/v1/completions`, a fresh prompt each, T=0.8
with llama.cpp's default top_k 40, top_p 0.95, min_p 0.05, `ignore_eos`) to three
servers on the host-bound tiny model (`random_gguf.tiny_host_bound`, as bench_host):
llama.cpp's `llama-server` (`-np 64 -kvu -t 2 -tb 2`), Juggler through its router (the
model loaded with `--parallel 64`, as bench_host), and that same Juggler backend called
directly (the router's key for it read from the backend's environment, as only the same
user can). Each round times `--requests` requests of 1 new token, of `--new` tokens
non-streamed, and of `--new` tokens streamed (SSE) on every server, the servers' order
flipping every round; each figure is the median over rounds of each round's median.

From those: a request's fixed cost (its 1-token time: the HTTP exchange, rendering,
tokenizing, the prefill, the answer), each further token's cost ((time of `--new`
tokens - time of 1) / (`--new` - 1)), the router's hop (router - direct), and every
figure against llama-server's. The router's and the backend's CPU time per request of
1 token come from /proc.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import completion_body, cpu_seconds, fresh_prompt
from bench_host import CTX, PARALLEL, System, start_llama, start_router
from random_gguf import tiny_host_bound

#: The header a backend takes its router's key in (juggler.backend_key.HEADER).
KEY_HEADER = "x-juggler-backend-key"
KINDS = ("1 token", "plain", "sse")
#: Requests of 1 token a round whose CPU time is read (/proc counts in 10 ms ticks).
CPU_REQUESTS = 100


def backend_of(router: System) -> tuple[System, str]:
    """The router's backend, called directly, and its key (from its command line and
    environment, which only the same user may read)."""
    pid = router.pids["backend"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    port = argv[argv.index("--port") + 1]
    env = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        if "=" in item
    )
    direct = System("direct", f"http://127.0.0.1:{port}", router.model_field, [], {"backend": pid})
    return direct, env["JUGGLER_BACKEND_KEY"]


def one_request(
    client: httpx.Client, model: str, n_new: int, stream: bool, rng: random.Random
) -> float:
    """Seconds from sending the request to the answer's last byte."""
    body = completion_body(model, fresh_prompt(rng), n_new)
    if stream:
        body["stream"] = True
    started = time.perf_counter()
    if stream:
        with client.stream("POST", "/v1/completions", json=body) as r:
            for _ in r.iter_raw():
                pass
            status = r.status_code
    else:
        r = client.post("/v1/completions", json=body)
        status = r.status_code
    took = time.perf_counter() - started
    if status != 200:
        raise RuntimeError(f"{client.base_url}: {status}")
    return took


def timed(
    client: httpx.Client, model: str, n_new: int, stream: bool, count: int, rng: random.Random
) -> float:
    """The median of `count` requests' times (after one not counted). llama-server
    sometimes closes a kept-alive connection after a streamed answer without answering
    the next request: such a request is sent again, not counted."""
    times: list[float] = []
    first = True
    while len(times) < count:
        try:
            took = one_request(client, model, n_new, stream, rng)
        except httpx.RemoteProtocolError:
            continue
        if first:
            first = False
            continue
        times.append(took)
    return statistics.median(times)


def cpu_per_request(
    system: System, client: httpx.Client, count: int, rng: random.Random
) -> dict[str, float]:
    """Each of `system`'s processes' CPU seconds per request of 1 token."""
    before = {name: cpu_seconds(pid) for name, pid in system.pids.items()}
    for _ in range(count):
        one_request(client, system.model_field, 1, False, rng)
    return {name: (cpu_seconds(pid) - before[name]) / count for name, pid in system.pids.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=20, help="requests a server, kind and round")
    ap.add_argument("--new", type=int, default=64, help="tokens of the longer requests")
    ap.add_argument("--model-path", type=Path, default=None, help="another GGUF to serve")
    args = ap.parse_args()
    model = args.model_path or tiny_host_bound()
    rng = random.Random(47)
    llama = start_llama(model, PARALLEL, CTX)
    router = start_router(model, PARALLEL, CTX)
    direct, key = backend_of(router)
    systems = [s for s in (llama, router, direct) if s is not None]
    clients = {
        s.name: httpx.Client(
            base_url=s.url, timeout=120, headers={KEY_HEADER: key} if s is direct else {}
        )
        for s in systems
    }
    shapes: dict[str, tuple[int, bool]] = {
        "1 token": (1, False),
        "plain": (args.new, False),
        "sse": (args.new, True),
    }
    got: dict[tuple[str, str], list[float]] = {}
    cpu: dict[str, list[float]] = {}
    try:
        for rnd in range(args.rounds):
            order = systems if rnd % 2 == 0 else systems[::-1]
            for kind, (n_new, stream) in shapes.items():
                for s in order:
                    took = timed(clients[s.name], s.model_field, n_new, stream, args.requests, rng)
                    got.setdefault((s.name, kind), []).append(took)
            per = cpu_per_request(router, clients[router.name], CPU_REQUESTS, rng)
            for name, seconds in per.items():
                cpu.setdefault(name, []).append(seconds)
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    finally:
        for c in clients.values():
            c.close()
        router.stop()
        if llama is not None:
            llama.stop()
    report(got, cpu, [s.name for s in systems], args)


def report(
    got: dict[tuple[str, str], list[float]],
    cpu: dict[str, list[float]],
    names: list[str],
    args: argparse.Namespace,
) -> None:
    med: Callable[[str, str], float] = lambda name, kind: statistics.median(got[(name, kind)])  # noqa: E731
    n = args.new
    print(
        f"\nOne client, one request at a time; medians of {args.rounds} rounds' medians "
        f"of {args.requests} requests (ms; per token: µs)"
    )
    print(f"{'':14s}" + "".join(f"{name:>16s}" for name in names))
    for kind in KINDS:
        label = f"{kind} ({1 if kind == '1 token' else n})"
        print(f"{label:14s}" + "".join(f"{med(name, kind) * 1000:16.2f}" for name in names))
    for kind in ("plain", "sse"):
        per = [(med(name, kind) - med(name, "1 token")) / (n - 1) * 1e6 for name in names]
        print(f"{'token ' + kind:14s}" + "".join(f"{p:16.0f}" for p in per))
    if "llama-server" in names:
        print("\nJuggler / llama-server (time over time: above 1.0x, Juggler is faster)")
        for name in (x for x in names if x != "llama-server"):
            ratios = "  ".join(
                f"{kind} {med('llama-server', kind) / med(name, kind):.2f}x" for kind in KINDS
            )
            print(f"  {name:8s} {ratios}")
    if "juggler" in names and "direct" in names:
        print("\nThe router's hop (router - direct)")
        for kind in KINDS:
            hop = med("juggler", kind) - med("direct", kind)
            print(f"  {kind:8s} {hop * 1000:6.2f} ms ({hop / med('juggler', kind):.0%})")
    print("\nCPU time a request of 1 token (µs): " + ", ".join(
        f"{name} {statistics.median(v) * 1e6:.0f}" for name, v in cpu.items()
    ))  # fmt: skip


if __name__ == "__main__":
    main()
