"""Residency with real `llamacpp` backends (python -m juggler.engine) on SmolLM2-135M."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import pytest

from juggler.manager import Manager
from juggler.types import Device

from .conftest import SMOLLM, FakeRegistry, llm, run, running, settings, until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SMOLLM.exists(), reason="SmolLM2 gguf not installed"),
]


def copies(tmp_path: Path, *names: str) -> dict[str, Path]:
    """Distinct model names are distinct models; give each its own path to the file."""
    out = {}
    for name in names:
        path = tmp_path / f"{name}.gguf"
        path.symlink_to(SMOLLM)
        out[name] = path
    return out


def resident(m: Manager) -> list[str]:
    return sorted(s.model_name for s in m.snapshot())


def alive(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_lru_two_slots_three_llms(tmp_path: Path) -> None:
    """Seed 000: "If a slot of TYPE is not available, evict (unload) the least-recently-used
    WrappedServer of TYPE, then attempt to load the new WrappedServer." -- and "Types of
    access that should update the timestamp: ... When an inference request ... starts and
    completes." (max_loaded_models=2, three LLMs)"""
    paths = copies(tmp_path, "llm-a", "llm-b", "llm-c")
    reg = FakeRegistry(*(llm(n, p) for n, p in paths.items()))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=2), reg) as m:
            a = await m.load("llm-a")
            b = await m.load("llm-b")
            assert a.device == Device.CPU  # what the backend reports: nothing offloaded
            health = a.to_health()
            assert health["device"] == "cpu" and health["recipe"] == "llamacpp"
            assert health["backend_url"].startswith("http://127.0.0.1:")
            assert {
                "model_name",
                "checkpoint",
                "type",
                "pid",
                "last_use",
                "pinned",
                "status",
                "is_busy",
            } <= set(health)
            async with await m.acquire("llm-a"):  # a request makes a the recent one
                pass
            await m.load("llm-c")
            assert resident(m) == ["llm-a", "llm-c"]
            assert alive(a.pid) and not alive(b.pid)
            most_recent = m.most_recent()
            assert most_recent is not None and most_recent.model_name == "llm-c"
            lease = await m.acquire("llm-b")  # auto-load evicts a, now the LRU
            lease.release()
            assert resident(m) == ["llm-b", "llm-c"] and not alive(a.pid)

    run(scenario())


def test_embedding_load_never_evicts_an_llm(tmp_path: Path, pooled_gguf: Path) -> None:
    """Seed 000: "we will consider `embedding` and `reranking` models as separate types from
    chat `llm`" -- each type has its own slots, so an embedding load leaves the LLM."""
    paths = copies(tmp_path, "chat")
    reg = FakeRegistry(
        llm("chat", paths["chat"]),
        llm("emb1", pooled_gguf, ("embeddings",)),
        llm("emb2", pooled_gguf, ("embeddings",)),
    )

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            chat = await m.load("chat")
            await m.load("emb1")
            emb2 = await m.load("emb2")
            assert emb2.to_health()["type"] == "embedding"
            assert resident(m) == ["chat", "emb2"] and alive(chat.pid)

    run(scenario())


def test_streaming_model_not_evicted_until_stream_ends(tmp_path: Path) -> None:
    """Seed 001: "A WrappedServer actively fulfilling an inference request cannot be evicted
    until it finishes. Pending loads queue indefinitely." -- with a real stream."""
    paths = copies(tmp_path, "streamer", "next")
    reg = FakeRegistry(*(llm(n, p) for n, p in paths.items()))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            lease = await m.acquire("streamer")
            body = {
                "model": "streamer",
                "stream": True,
                "max_tokens": 48,
                "prompt": "Count from one to twenty: one, two,",
            }
            chunks = 0
            loading: asyncio.Task[object] | None = None
            auth = m.backend_auth
            async with httpx.AsyncClient(trust_env=False, timeout=60, auth=auth) as client:
                url = lease.backend_url + "/v1/completions"
                async with client.stream("POST", url, json=body) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        if not line.startswith("data: "):
                            continue
                        chunks += 1
                        if loading is None:  # first token: now ask for the other model
                            loading = asyncio.create_task(m.load("next"))
                            await until(lambda: m.stats().get("queued") == 1)
                        assert not loading.done() and alive(lease.pid)
            assert loading is not None and chunks > 2
            assert not loading.done() and resident(m) == ["streamer"]
            lease.release()  # the router releases when the stream ends
            await loading
            assert resident(m) == ["next"] and not alive(lease.pid)

    run(scenario())


@pytest.mark.usefixtures("restarts_never_due")
def test_sigkilled_backend_is_noticed_and_slot_freed(tmp_path: Path) -> None:
    """Issue 4 tests: "a backend killed with SIGKILL is noticed and its slot freed" """
    paths = copies(tmp_path, "victim", "other")
    reg = FakeRegistry(*(llm(n, p) for n, p in paths.items()))

    async def scenario() -> None:
        async with running(settings(max_loaded_models=1), reg) as m:
            snap = await m.load("victim")
            assert snap.pid is not None
            os.kill(snap.pid, signal.SIGKILL)
            await until(lambda: m.snapshot() == [])
            assert m.stats()["backend_deaths"] == 1 and m.most_recent() is None
            other = await m.load("other")
            assert m.stats().get("evictions", 0) == 0 and alive(other.pid)

    run(scenario())
