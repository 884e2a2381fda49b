"""Residency benchmark: two LLMs kept hot versus one slot that reloads on every switch.

    .venv/bin/python bench/bench_residency.py [--requests 40] [--models A,B | --twin]
        [--threads 1] [--completions]

Starts `python -m juggler serve` three times on a free port:
  1. baseline    --max-loaded-models 1, each model alone: one warm-up request, then
                 requests/2 measured requests to it (a one-model run per model);
  2. resident    --max-loaded-models 2: warm up both, then `requests` requests alternating
                 between them;
  3. one slot    --max-loaded-models 1: the same alternating run (reloads every switch).
Each request streams a short chat completion through the router
(/api/v1/chat/completions); time to first token (TTFT) is the time to the first content
chunk. Reloads are counted from /api/v1/health: a model whose backend pid changes, or that
comes back after leaving, was reloaded. Goals (issue 4): resident reloads after warm-up = 0;
resident median TTFT <= 1.2x the one-model median. Prints ratios; not part of the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "bench" / "_build" / "home"  # keeps assembled checkpoints between runs
DEFAULT_MODELS = ("SmolLM2-135M-Instruct-GGUF", "Gemma-3-270M-GGUF")
TWIN = "user.SmolLM2-twin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def router(max_loaded: int, threads: int, log: Path) -> Iterator[str]:
    """A `juggler serve` process with nothing loaded; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
    env.update({"JUGGLER_HOME": str(HOME), "PYTHONUNBUFFERED": "1"})
    cmd = [
        sys.executable,
        "-m",
        "juggler",
        "serve",
        "--port",
        str(port),
        "--model",
        "",
        "--max-loaded-models",
        str(max_loaded),
        "--ctx-size",
        "512",
        "--parallel",
        "1",
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    HOME.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"router exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/api/v1/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("router did not start in 120 s")
            time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class Run:
    ttft_s: list[float] = field(default_factory=list)
    by_model: dict[str, list[float]] = field(default_factory=dict)
    reloads: int = 0
    pids: dict[str, int] = field(default_factory=dict)

    def median(self) -> float:
        return statistics.median(self.ttft_s)


#: Request shape: chat (default) or plain completions (--completions).
ENDPOINT = {"chat": "/api/v1/chat/completions", "completions": "/api/v1/completions"}
MODE = "chat"


def _first_text(line: str) -> bool:
    """Whether an SSE line carries generated text (not the empty role-only first chunk)."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    choice = choices[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


def ttft(client: httpx.Client, model: str, n: int) -> float:
    """Time to the first generated text of one streamed request. The prompt differs per
    request (`n`) so that every request prefills, as real traffic does."""
    body: dict[str, object] = {"model": model, "stream": True, "max_tokens": 8, "temperature": 0}
    question = f"Request {n}: name one colour and one animal."
    if MODE == "chat":
        body["messages"] = [{"role": "user", "content": question}]
    else:
        body["prompt"] = question
    start = time.perf_counter()
    first: float | None = None
    with client.stream("POST", ENDPOINT[MODE], json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and _first_text(line):
                first = time.perf_counter() - start
    if first is None:
        raise SystemExit(f"{model}: the stream had no content")
    return first


def track_reloads(client: httpx.Client, run: Run, count: bool) -> None:
    """Compare backend pids with the last look; a changed or returning pid is a reload."""
    health = client.get("/api/v1/health").json()
    now = {e["model_name"]: e["pid"] for e in health.get("all_models_loaded", [])}
    for name, pid in now.items():
        if count and name in run.pids and run.pids[name] != pid:
            run.reloads += 1
        run.pids[name] = pid


def measure(client: httpx.Client, run: Run, model: str, *, record: bool) -> None:
    t = ttft(client, model, len(run.ttft_s) + (0 if record else 1000 + len(run.pids)))
    track_reloads(client, run, count=record)
    if record:
        run.ttft_s.append(t)
        run.by_model.setdefault(model, []).append(t)


def baseline(models: tuple[str, str], n: int, threads: int, log: Path) -> Run:
    run = Run()
    with router(1, threads, log) as base, httpx.Client(base_url=base, timeout=300) as client:
        for model in models:
            measure(client, run, model, record=False)  # load + warm-up
            for _ in range(n // 2):
                measure(client, run, model, record=True)
    return run


def alternating(models: tuple[str, str], n: int, slots: int, threads: int, log: Path) -> Run:
    run = Run()
    with router(slots, threads, log) as base, httpx.Client(base_url=base, timeout=300) as client:
        for model in models:
            measure(client, run, model, record=False)  # load + warm-up
        for i in range(n):
            measure(client, run, models[i % 2], record=True)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per backend")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument(
        "--completions", action="store_true", help="stream /completions instead of chat"
    )
    parser.add_argument(
        "--twin",
        action="store_true",
        help=f"second model = {TWIN}, SmolLM2's file under another name (same cost)",
    )
    args = parser.parse_args()
    global MODE
    MODE = "completions" if args.completions else "chat"
    if args.twin:
        from juggler.registry.catalog import Registry

        smol = Registry(home=HOME).get(DEFAULT_MODELS[0])
        Registry(home=HOME).add_user_model(TWIN, checkpoint=smol.checkpoint)
        args.models = f"{DEFAULT_MODELS[0]},{TWIN}"
    a, b = args.models.split(",")
    models = (a, b)
    logs = ROOT / "bench" / "_build"
    logs.mkdir(parents=True, exist_ok=True)

    base = baseline(models, args.requests, args.threads, logs / "router-baseline.log")
    resident = alternating(models, args.requests, 2, args.threads, logs / "router-resident.log")
    one_slot = alternating(models, args.requests, 1, args.threads, logs / "router-oneslot.log")

    ref = base.median()
    print(f"models: {a} / {b}; {args.requests} alternating requests; TTFT medians")
    print(f"  one-model baseline   {ref * 1000:8.1f} ms   1.00x")
    for label, run in (("max_loaded_models=2", resident), ("max_loaded_models=1", one_slot)):
        print(
            f"  {label:19}  {run.median() * 1000:8.1f} ms   {run.median() / ref:5.2f}x   "
            f"reloads after warm-up: {run.reloads}"
        )
    for model in models:
        m_ref = statistics.median(base.by_model[model])
        m_res = statistics.median(resident.by_model[model])
        m_one = statistics.median(one_slot.by_model[model])
        print(
            f"  {model}: baseline {m_ref * 1000:.1f} ms, resident {m_res / m_ref:.2f}x, "
            f"one slot {m_one / m_ref:.2f}x"
        )
    ok = resident.reloads == 0 and resident.median() <= 1.2 * ref
    print(f"goal (0 reloads, <= 1.2x): {'met' if ok else 'NOT met'}")
    if args.json:
        print(
            json.dumps(
                {
                    "baseline_ms": ref * 1000,
                    "resident_ratio": resident.median() / ref,
                    "resident_reloads": resident.reloads,
                    "one_slot_ratio": one_slot.median() / ref,
                    "one_slot_reloads": one_slot.reloads,
                }
            )
        )


if __name__ == "__main__":
    main()
