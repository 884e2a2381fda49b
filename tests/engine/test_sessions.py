"""Session API and KV reuse, read back from the backend's /stats."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from tests.engine.conftest import Backend, generate

pytestmark = pytest.mark.slow


def test_chat_session_turn_k_prefills_only_turn_k(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        topic = uuid.uuid4().hex[:8]
        system = {"role": "system", "content": f"You are a terse assistant #{topic}. " * 8}
        history_tokens = 0
        for turn in range(4):
            msgs = [{"role": "user", "content": f"Turn {turn}: name a colour, please."}]
            if turn == 0:
                msgs.insert(0, system)
            appended = c.post(f"/v1/sessions/{sid}/input", json={"messages": msgs}).json()
            assert appended["session_id"] == sid and appended["n_tokens"] > 0
            chunks, done = generate(c, sid, 12)
            assert done["finish_reason"] in ("stop", "length")
            stats = smol_backend.stats()
            assert stats["output_tokens"] == len(chunks) == done["usage"]["completion_tokens"]
            prefilled = stats["prompt_tokens_prefilled"]
            reused = stats["prompt_tokens_reused"]
            assert isinstance(prefilled, int) and isinstance(reused, int)
            assert prefilled + reused == stats["input_tokens"]
            # New input + the assistant header (+1 leftover token after a length stop).
            assert appended["n_tokens"] < prefilled <= appended["n_tokens"] + 6
            if turn > 0:
                assert reused >= history_tokens > 100
            history_tokens = int(stats["input_tokens"]) + len(chunks) - 1
        assert c.delete(f"/v1/sessions/{sid}").status_code == 200


def test_text_session_appends_deltas(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        a = c.post(f"/v1/sessions/{sid}/input", json={"text": "The colours of the rainbow"}).json()
        b = c.post(f"/v1/sessions/{sid}/input", json={"text": " are red, orange,"}).json()
        assert b["n_past"] == a["n_past"] + b["n_tokens"]
        chunks, done = generate(c, sid, 5)
        assert len(chunks) == 5 and done["finish_reason"] == "length"
        assert all(len(ch["token_ids"]) == 1 for ch in chunks)
        r = c.post(
            f"/v1/sessions/{sid}/input", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert r.status_code == 400
        c.delete(f"/v1/sessions/{sid}")


def test_cancel_keeps_kv_and_the_next_generate_continues(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/input", json={"text": "Here is a very long story: "})
        got = 0
        final: dict[str, Any] = {}
        req = {"max_new_tokens": 400, "temperature": 0}
        with c.stream("POST", f"/v1/sessions/{sid}/generate", json=req) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                if obj.get("done"):
                    final = obj
                    continue
                got += 1
                if got == 3:
                    assert c.post(f"/v1/sessions/{sid}/cancel").json()["cancelled"] is True
        assert final["finish_reason"] == "cancelled"
        assert 3 <= final["usage"]["completion_tokens"] < 400
        held = final["usage"]["prompt_tokens"] + final["usage"]["completion_tokens"]
        _, done = generate(c, sid, 4)
        usage = done["usage"]
        # The conversation continues after the cancelled reply: everything is reused.
        assert usage["prompt_tokens"] == held
        assert usage["prompt_tokens_prefilled"] <= 1
        assert c.post(f"/v1/sessions/{sid}/cancel").json()["cancelled"] is False
        c.delete(f"/v1/sessions/{sid}")


def wait_for_stats(b: Backend, check: Any, what: str) -> dict[str, Any]:
    """/stats once `check` holds: a worker answers a command, then publishes its counts
    at the end of that step (a moment later on a busy machine)."""
    deadline = time.monotonic() + 60
    while not check(stats := b.stats()):
        assert time.monotonic() < deadline, f"{what}: {stats}"
        time.sleep(0.02)  # polling interval
    return stats


def test_ending_a_session_returns_kv_usage(smol_backend: Backend) -> None:
    with smol_backend.client() as c:
        # Earlier tests' cached prefixes leave the cache when the worker is next idle
        # (parked), which on a busy machine may be in the middle of this test: start
        # once they are gone, so that only this session changes the count.
        idle = wait_for_stats(smol_backend, lambda s: s["cached_sequences"] == 0, "parked")
        before = idle["kv_cells_used"]
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/input", json={"text": "Tell me about the sea. " * 10})
        generate(c, sid, 8)
        during = smol_backend.stats()["kv_cells_used"]
        assert isinstance(during, int) and isinstance(before, int) and during > before + 50
        assert c.delete(f"/v1/sessions/{sid}").json()["deleted"] is True
        wait_for_stats(smol_backend, lambda s: s["kv_cells_used"] == before, "cells kept")
        r = c.post(f"/v1/sessions/{sid}/input", json={"text": "again"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
        assert c.delete(f"/v1/sessions/{sid}").status_code == 404


def test_stateless_chat_with_shared_prefix_reuses_kv(smol_backend: Backend) -> None:
    system = {
        "role": "system",
        "content": f"Conversation {uuid.uuid4().hex}. Answer in one short line. " * 6,
    }
    messages: list[dict[str, str]] = [system]
    with smol_backend.client() as c:
        for turn in range(4):
            messages.append({"role": "user", "content": f"Question {turn}: name an animal."})
            body = c.post(
                "/v1/chat/completions",
                json={"messages": messages, "max_tokens": 10, "temperature": 0},
            ).json()
            reply = body["choices"][0]["message"]["content"]
            stats = smol_backend.stats()
            assert stats["input_tokens"] == body["usage"]["prompt_tokens"]
            prefilled = stats["prompt_tokens_prefilled"]
            reused = stats["prompt_tokens_reused"]
            assert isinstance(prefilled, int) and isinstance(reused, int)
            if turn == 0:
                assert reused < 5
            else:
                # Only the new user turn (and the tail of the last reply) is decoded.
                assert prefilled <= 40 < reused
            messages.append({"role": "assistant", "content": reply})


def test_idle_compaction_moves_kv_without_changing_a_conversation(smol_backend: Backend) -> None:
    """An idle worker compacts its KV cells after a burst; the session it moved
    continues exactly as if nothing happened (greedy tokens equal an unbroken run)."""
    story = {"text": "Once upon a time, in a quiet village by the sea, "}
    with smol_backend.client() as c:
        ref = c.post("/v1/sessions", json={}).json()["session_id"]
        c.post(f"/v1/sessions/{ref}/input", json=story)
        whole, _ = generate(c, ref, 24)
        c.delete(f"/v1/sessions/{ref}")

        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/input", json=story)
        first, _ = generate(c, sid, 8)
        # Counted before the burst: the worker may go idle and compact as soon as the
        # burst ends, before the test reads anything (a busy machine is slow to read).
        compactions = smol_backend.stats()["kv_compactions_total"]
        assert isinstance(compactions, int)
        # A burst of stateless requests takes and frees cells around the session.
        for i in range(4):
            r = c.post(
                "/v1/completions",
                json={"prompt": f"Burst {i}: " + "waves " * (20 + 15 * i), "max_tokens": 4},
            )
            assert r.status_code == 200
        used = smol_backend.stats()["kv_cells_used"]
        deadline = time.monotonic() + 60
        while smol_backend.stats()["kv_compactions_total"] == compactions:
            assert time.monotonic() < deadline, "no compaction after the worker went idle"
            time.sleep(0.1)  # polling interval
        # Cached prefixes of the burst may have been parked; the session's cells stay.
        after = smol_backend.stats()["kv_cells_used"]
        assert isinstance(after, int) and isinstance(used, int) and after <= used
        rest, done = generate(c, sid, 16)
        assert done["usage"]["prompt_tokens_prefilled"] <= 1, "the session's KV survived"
        ids = [t for ch in first + rest for t in ch["token_ids"]]
        assert ids == [t for ch in whole for t in ch["token_ids"]]
        c.delete(f"/v1/sessions/{sid}")
