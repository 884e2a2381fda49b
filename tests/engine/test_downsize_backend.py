"""Seed 002's soft idle on a real SmolLM2 backend process (ctx 8192: a 180 MiB KV cache).

Issue 11, "Done when": "downsize after idle with an RSS drop of at least the KV cache's
size; a session continues after downsize with the same greedy output as without it"."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.engine.conftest import start_backend

pytestmark = pytest.mark.slow

#: SmolLM2-135M: 30 layers x 3 KV heads x 64 dims, K and V in f16, per token.
KV_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 2
CTX = 8192


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def turn(c: httpx.Client, sid: str, text: str) -> str:
    r = c.post(f"/v1/sessions/{sid}/input", json={"text": text})
    assert r.status_code == 200, r.text
    parts = []
    with c.stream(
        "POST", f"/v1/sessions/{sid}/generate", json={"max_new_tokens": 16, "temperature": 0}
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                parts.append(json.loads(line[6:]).get("text", ""))
    return "".join(parts)


@pytest.mark.parametrize("park_mb", ["1024", "0"], ids=["kv-in-memory", "kv-on-disk"])
def test_downsize_frees_at_least_the_kv_cache_and_sessions_continue_greedily(
    smol_path: Path, tmp_path: Path, park_mb: str
) -> None:
    b = start_backend(
        smol_path, "smol", tmp_path, "--ctx-size", str(CTX), "--parallel", "4",
        "--park-memory-mb", park_mb,
    )  # fmt: skip
    try:
        with b.client() as c:
            sids = [c.post("/v1/sessions", json={}).json()["session_id"] for _ in range(3)]
            story = "Once upon a time, in a quiet village by the sea,"
            first = {turn(c, sid, story) for sid in sids}
            assert len(first) == 1, "greedy: the same story three times"
            control = turn(c, sids[2], " The end.")  # never parked
            c.delete(f"/v1/sessions/{sids[2]}")
            health = c.get("/health").json()["memory"]
            assert health["context_bytes"] > 0 and not health["downsized"]
            before = rss(b.proc.pid)
            got = c.post("/internal/downsize").json()
            after = rss(b.proc.pid)
            assert got["downsized"] is True and got["sessions_parked"] == 2, got
            kv = KV_BYTES_PER_TOKEN * CTX
            assert before - after >= kv, f"freed {(before - after) >> 20} MiB, KV {kv >> 20} MiB"
            assert c.get("/health").json()["memory"]["downsized"] is True
            # The sessions continue after the downsize exactly as the control did.
            assert [turn(c, sid, " The end.") for sid in sids[:2]] == [control, control]
            mem = c.get("/health").json()["memory"]
            assert mem["restores"] == 1 and not mem["downsized"]
            assert rss(b.proc.pid) - after >= kv, "the restored context holds the KV again"
    finally:
        b.stop()
