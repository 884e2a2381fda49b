"""Prefix caching across stateless requests, parking, and chat speculation, read back
from real backends' /stats (each test starts its own backend)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from juggler.engine.schedule.batch import FINAL_ROWS
from tests.engine.conftest import Backend, generate, start_backend

pytestmark = pytest.mark.slow


def test_one_off_prompts_keep_only_the_newest_prefix_conversations_keep_more(
    smol_path: Path, log_dir: Path
) -> None:
    """Cached cells slow every decode, so they are kept only while requests reuse them.
    (Parking is off here: an idle moment would move the cached prefixes out.)"""
    b = start_backend(
        smol_path, "smol", log_dir, "--parallel", "8", "--ctx-size", "4096", "--parked-cells", "0"
    )
    try:
        with b.client() as c:

            def one_off(i: int) -> None:
                r = c.post(
                    "/v1/completions",
                    json={"prompt": f"{uuid.uuid4().hex} item {i}:", "max_tokens": 3},
                )
                assert r.status_code == 200

            for i in range(4):
                one_off(i)
            assert b.stats()["cached_sequences"] == 1, "one-off prompts: only the newest"

            system = {"role": "system", "content": "You answer in one short line. " * 12}
            messages: list[dict[str, str]] = [system]
            for turn in range(2):
                messages.append({"role": "user", "content": f"Question {turn}: a colour?"})
                body = c.post(
                    "/v1/chat/completions", json={"messages": messages, "max_tokens": 4}
                ).json()
                messages.append(
                    {"role": "assistant", "content": body["choices"][0]["message"]["content"]}
                )
            assert b.stats()["prompt_tokens_reused"] >= 64, "turn 2 hit the cache"
            for i in range(2):
                one_off(10 + i)
            # The conversation's prefix and the one-offs all fit the budget (ctx/8 cells).
            cached = b.stats()["cached_sequences"]
            assert isinstance(cached, int) and cached >= 3
    finally:
        b.stop()


def test_an_idle_worker_parks_a_conversation_and_restores_it_exactly(
    smol_path: Path, log_dir: Path
) -> None:
    """Parked prefixes leave the KV cache while idle and come back bit for bit: turn 2
    after a park and restore equals turn 2 on a backend that kept the prefix in its cache."""
    parking = start_backend(smol_path, "smol", log_dir, "--ctx-size", "4096")
    keeping = start_backend(smol_path, "smol", log_dir, "--ctx-size", "4096", "--parked-cells", "0")
    system = {"role": "system", "content": f"Chat {uuid.uuid4().hex}. Be brief. " * 10}
    try:
        replies: dict[str, list[str]] = {}
        for name, b in (("parking", parking), ("keeping", keeping)):
            messages: list[dict[str, str]] = [system]
            with b.client() as c:
                for turn in range(2):
                    messages.append({"role": "user", "content": f"Turn {turn}: a fruit?"})
                    body = c.post(
                        "/v1/chat/completions",
                        json={"messages": messages, "max_tokens": 12, "temperature": 0},
                    ).json()
                    reply = body["choices"][0]["message"]["content"]
                    replies.setdefault(name, []).append(reply)
                    messages.append({"role": "assistant", "content": reply})
                    if turn == 0 and b is parking:
                        deadline = time.monotonic() + 10
                        while b.stats()["parked_sequences"] != 1:
                            assert time.monotonic() < deadline, "the idle worker did not park"
                            time.sleep(0.1)  # polling interval
                        assert b.stats()["kv_cells_used"] == 0, "parked cells left the cache"
                stats = b.stats()
                reused = stats["prompt_tokens_reused"]
                assert isinstance(reused, int) and reused >= 64, "turn 2 reused turn 1's KV"
                if b is parking:
                    assert stats["parked_sequences"] == 0, "restored, no longer parked"
        assert replies["parking"] == replies["keeping"]
    finally:
        parking.stop()
        keeping.stop()


def _wait_prefilled(b: Backend, n_past: int) -> None:
    """Poll until the worker has decoded the appended turn: the session is the only
    one holding cells, and a short turn and its header go in with one decode."""
    deadline = time.monotonic() + 20
    while (used := b.stats()["kv_cells_used"]) <= n_past:
        assert isinstance(used, int) and time.monotonic() < deadline, (used, n_past)
        time.sleep(0.02)  # polling interval


def test_a_user_turn_prefills_the_assistant_header_and_generate_starts_at_once(
    smol_path: Path, log_dir: Path
) -> None:
    """/input of a user turn also prefills the assistant header and keeps the logits:
    a 1-token generate then needs no decode at all, and the output is the same as when
    generate arrives before that prefill is done. More input takes the header back."""
    b = start_backend(smol_path, "smol", log_dir, "--ctx-size", "2048", "--parked-cells", "0")
    system = {"role": "system", "content": "You are a helpful assistant."}
    ask = {"role": "user", "content": "Name three colours."}
    more = {"role": "user", "content": "And three fruits."}
    try:
        with b.client() as c:

            def session(*turns: list[dict[str, str]], wait: bool) -> str:
                sid = c.post("/v1/sessions", json={}).json()["session_id"]
                for msgs in turns:
                    n_past = c.post(f"/v1/sessions/{sid}/input", json={"messages": msgs}).json()[
                        "n_past"
                    ]
                    if wait:
                        _wait_prefilled(b, n_past)
                return sid

            # 1. Generate arrives at once (no saved logits) vs after the prefill.
            eager = session([system, ask], wait=False)
            eager_chunks, _ = generate(c, eager, 12)
            c.delete(f"/v1/sessions/{eager}")
            waited = session([system, ask], wait=True)
            decodes = b.stats()["decode_calls_total"]
            first, _ = generate(c, waited, 1)
            assert b.stats()["decode_calls_total"] == decodes, "first token from kept logits"
            rest, _ = generate(c, waited, 11)
            ids = [t for ch in first + rest for t in ch["token_ids"]]
            assert ids == [t for ch in eager_chunks for t in ch["token_ids"]]
            c.delete(f"/v1/sessions/{waited}")

            # 2. A second user message takes the decoded header back out of the KV.
            split = session([system, ask], [more], wait=True)
            split_chunks, _ = generate(c, split, 12)
            c.delete(f"/v1/sessions/{split}")
            whole = session([system, ask, more], wait=False)
            whole_chunks, _ = generate(c, whole, 12)
            c.delete(f"/v1/sessions/{whole}")
            assert [ch["token_ids"] for ch in split_chunks] == [
                ch["token_ids"] for ch in whole_chunks
            ]
    finally:
        b.stop()


def test_concurrent_requests_about_one_document_share_its_cells(
    smol_path: Path, log_dir: Path
) -> None:
    """A document asked about by several clients at once is prefilled once: while the
    first request holds it (running), the others start on its cells, shared, and answer
    as a lone request would."""
    from concurrent.futures import ThreadPoolExecutor

    b = start_backend(smol_path, "smol", log_dir, "--parallel", "4", "--ctx-size", "4096")
    doc = "Shipment SH-7700 left Rotterdam for Lyon with Nordfrakt on a Monday. " * 20
    try:
        with b.client() as c:

            def ask(i: int, n: int = 24) -> str:
                body = {
                    "messages": [{"role": "user", "content": f"{doc}\nQuestion {i}: where to?"}],
                    "max_tokens": n,
                    "temperature": 0,
                }
                r = c.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                return str(r.json()["choices"][0]["message"]["content"])

            ask(0, 2)  # the document is cached once
            before = b.stats()
            with ThreadPoolExecutor(3) as pool:
                answers = list(pool.map(ask, (1, 2, 3)))
            after = b.stats()
            assert after["prefix_shares_total"] - before["prefix_shares_total"] >= 1
            # Three prompts of ~300 tokens: without sharing, two would prefill it all.
            prefilled = (
                after["prompt_tokens_prefilled_total"] - before["prompt_tokens_prefilled_total"]
            )
            assert prefilled < 3 * 30, prefilled
            assert all(answers), answers
    finally:
        b.stop()


def test_a_short_prompt_asked_again_after_a_pause_prefills_only_its_last_tokens(
    smol_path: Path, log_dir: Path
) -> None:
    """A short prompt asked again (a story prompt, a title request) reuses all of its
    cached tokens but the last `FINAL_ROWS`, decoded again by two rows as the first time
    (`schedule.batch`), from the cache and after the idle worker parked them: under 64
    shared tokens it used to be prefilled whole every time (118 ms of a 1.4 s story on
    SmolLM2, where llama-server reused its slot)."""
    b = start_backend(smol_path, "smol", log_dir, "--ctx-size", "4096")
    body = {
        "messages": [{"role": "user", "content": "Tell me a short story about a fox."}],
        "max_tokens": 40,
        "temperature": 0,
    }
    try:
        with b.client() as c:

            def ask() -> int:
                before = b.stats()["prompt_tokens_prefilled_total"]
                r = c.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["message"]["content"]
                prefilled = b.stats()["prompt_tokens_prefilled_total"] - before
                assert isinstance(prefilled, int)
                return prefilled

            first = ask()
            assert 8 < first < 64, first  # short: the whole prompt was prefilled
            assert ask() == FINAL_ROWS, "asked again at once: shared from the cached sequence"
            deadline = time.monotonic() + 10
            while b.stats()["parked_sequences"] == 0:
                assert time.monotonic() < deadline, "the idle worker did not park"
                time.sleep(0.1)  # polling interval
            assert ask() == FINAL_ROWS, "asked again after a pause: restored from the parked copy"
    finally:
        b.stop()
