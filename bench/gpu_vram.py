"""Issue 48's VRAM figures: what Juggler says each model holds on the GPU, against what
NVML (nvidia-smi's per-process figure) says, and llama-server's for the same model.

    python bench/gpu_vram.py MODEL.gguf [--layers N]

Starts `juggler serve` (the llama.cpp library and backend it finds: `LLAMA_CPP_LIB_PATH`
and the default `llamacpp_backend`, which follows what was built), registers MODEL and
loads it with every layer it can offload, then with `--layers` (default: half of them),
printing each time the device, the layers offloaded, the VRAM health reports (and its
source) and NVML's figure for the backend's process; then `juggler ps`; then
llama-server (`JUGGLER_LLAMA_BIN`) with `-ngl 99` on the same model and its NVML figure.
Without an NVIDIA GPU (scripts/gpu-check.sh's CPU rehearsal) the same steps run and say
so: the model runs on the CPU, with nothing on a GPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import BIN, Server, free_port, start, wait_ready

ADMIN = "gpu-vram-admin"
NAME = "user.gpu-check"
MIB = 1 << 20


def nvml_by_pid() -> dict[int, int] | None:
    """NVML's per-process GPU memory (None without NVML or a device)."""
    from juggler.accel.nvidia import open_nvml

    nvml = open_nvml()
    return nvml.process_bytes() if nvml is not None else None


def show(label: str, entry: dict[str, Any]) -> None:
    memory = entry.get("memory") or {}
    layers = entry.get("gpu_layers") or {}
    pid = entry.get("pid")
    per_pid = nvml_by_pid()
    line = (
        f"{label}: device {entry.get('device')}, layers {layers.get('layers')}/{layers.get('of')}"
        f", VRAM {int(memory.get('vram_bytes') or 0) / MIB:.0f} MiB"
        f" ({memory.get('vram_source') or 'nothing on a GPU'})"
        f", RSS {int(memory.get('rss_bytes') or 0) / MIB:.0f} MiB"
    )
    if per_pid is None:
        print(line + "; NVML: no NVIDIA GPU here")
        return
    held = per_pid.get(int(pid)) if pid else None
    if held:
        ratio = int(memory.get("vram_bytes") or 0) / held
        line += f"; NVML (nvidia-smi) {held / MIB:.0f} MiB: Juggler/NVML {ratio:.3f}"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", type=Path)
    ap.add_argument("--layers", type=int, default=-1, help="partial load (default: half)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="gpu-vram-"))
    port = free_port()
    cmd = [
        sys.executable, "-m", "juggler", "serve", "--port", str(port), "--model", "",
        "--admin-api-key", ADMIN, "--log-level", "warning",
    ]  # fmt: skip
    proc, log = start(cmd, "router", {"JUGGLER_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    router = Server("juggler", proc, f"http://127.0.0.1:{port}", None, log)
    servers = [router]
    try:
        wait_ready(router, "/live", lambda r: r.status_code == 200)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=router.url, headers=admin, timeout=600) as c:
            info = c.get("/api/v1/system-info").json()
            llamacpp = info["recipes"]["llamacpp"]
            gpus = info["devices"]["nvidia_gpu"]
            print(f"library: {llamacpp.get('library')}")
            print(f"default llamacpp_backend: {llamacpp['default_backend']}; NVIDIA GPUs: "
                  + (", ".join(g["name"] for g in gpus) or "none"))  # fmt: skip
            pull = {"model_name": NAME, "checkpoint": str(args.model), "recipe": "llamacpp"}
            assert c.post("/api/v1/pull", json=pull).status_code == 200
            r = c.post("/api/v1/load", json={"model_name": NAME})
            assert r.status_code == 200, r.text
            full = r.json()["model"]
            entry = next(m for m in c.get("/api/v1/health").json()["all_models_loaded"])
            show("automatic layers", entry)
            layers = args.layers if args.layers >= 0 else (full["gpu_layers"]["of"] or 2) // 2
            r = c.post("/api/v1/load", json={"model_name": NAME, "n_gpu_layers": layers})
            if r.status_code == 200:
                entry = next(m for m in c.get("/api/v1/health").json()["all_models_loaded"])
                show(f"n_gpu_layers {layers}", entry)
            else:
                print(f"n_gpu_layers {layers}: {r.status_code} {r.json()['error']['message']}")
        ps = [sys.executable, "-m", "juggler", "ps", "--port", str(port)]
        print(subprocess.run(ps, capture_output=True, text=True, timeout=60).stdout)
        exe = BIN / "llama-server"
        if exe.exists():
            lport = free_port()
            lcmd = [str(exe), "-m", str(args.model), "-ngl", "99", "--port", str(lport)]
            lproc, llog = start(lcmd, "llama-server")
            llama = Server("llama-server", lproc, f"http://127.0.0.1:{lport}", None, llog)
            servers.append(llama)
            wait_ready(llama, "/health", lambda r: r.status_code == 200)
            per_pid = nvml_by_pid()
            held = (per_pid or {}).get(lproc.pid)
            print(f"llama-server -ngl 99: NVML {held / MIB:.0f} MiB" if held
                  else "llama-server -ngl 99: nothing on a GPU (NVML has no figure)")  # fmt: skip
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
