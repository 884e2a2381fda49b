"""Issue 24, item 6: "`/slots` and `/tokenize` as llama.cpp defines them (`llamacpp.md`)",
on a backend over the fake model (milliseconds)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.server import create_app
from juggler.engine.runtime import Engine
from juggler.options import EngineFlags
from tests.engine.fake_llama import BOS, FakeLlama

PARALLEL = 4
T = TypeVar("T")


@pytest.fixture()
def client() -> Iterator[TestClient]:
    flags = EngineFlags(threads=1, ctx_size=512, workers=2, parallel=PARALLEL)
    config = EngineConfig("fake.gguf", "fake", flags=flags)
    with TestClient(create_app(Engine(config, FakeLlama()))) as c:
        yield c


def until(probe: Callable[[], T | None], timeout_s: float = 10.0) -> T:
    """`probe()` once it is not None (the worker publishes after its tick)."""
    deadline = time.monotonic() + timeout_s
    while (got := probe()) is None:
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.005)
    return got


def slots(c: TestClient) -> list[dict[str, Any]]:
    r = c.get("/slots")
    assert r.status_code == 200
    data: list[dict[str, Any]] = r.json()
    return data


def test_slots_list_every_sequence_as_llama_cpp_shows_a_slot(client: TestClient) -> None:
    """llamacpp.md, `GET /v1/slots`: each slot has `id`, `state` ("idle", "processing"),
    `next_token` (`has_next_token`, `n_remain`, `n_decoded`), `task_id` ("-1 if idle")
    and `cache_tokens`."""
    got = slots(client)
    assert [s["id"] for s in got] == list(range(2 * PARALLEL))
    assert got[0] == {
        "id": 0,
        "n_ctx": 512,
        "state": "idle",
        "is_processing": False,
        "next_token": {"has_next_token": False, "n_remain": 0, "n_decoded": 0},
        "task_id": -1,
        "cache_tokens": 0,
    }


def test_erase_forgets_a_cached_prefix_and_refuses_a_session(client: TestClient) -> None:
    """llamacpp.md, `action=erase`: "Erase (clear) the prompt cache of a specific slot.
    This removes all cached context from the slot, resetting it to an empty state";
    answers `{"id_slot"}`."""
    r = client.post("/v1/completions", json={"prompt": "hello there", "max_tokens": 3})
    assert r.status_code == 200
    cached = until(lambda: [s for s in slots(client) if s["cache_tokens"] > 0] or None)
    assert len(cached) == 1 and cached[0]["state"] == "idle"
    slot = cached[0]
    erased = client.post(f"/slots/{slot['id']}?action=erase")
    assert erased.json() == {"id_slot": slot["id"], "n_erased": slot["cache_tokens"]}
    assert all(s["cache_tokens"] == 0 for s in slots(client))
    assert client.post(f"/slots/{slot['id']}?action=erase").json()["n_erased"] == 0
    sid = client.post("/v1/sessions", json={}).json()["session_id"]
    client.post(f"/v1/sessions/{sid}/input", json={"text": "abc"})
    held = until(lambda: next((s for s in slots(client) if s["cache_tokens"] > 0), None))
    refused = client.post(f"/slots/{held['id']}?action=erase")
    assert refused.status_code == 409 and sid in refused.json()["error"]["message"]


def test_save_and_restore_need_a_slot_save_path_juggler_does_not_have(
    client: TestClient,
) -> None:
    """llamacpp.md: "The llama.cpp server must be started with the `--slot-save-path`
    argument for save operations to work" (Lemonade's suite accepts a 501
    `not_supported_error` naming it)."""
    for action in ("save", "restore"):
        r = client.post(f"/slots/0?action={action}", json={"filename": "x.bin"})
        assert r.status_code == 501
        assert r.json()["error"]["type"] == "not_supported_error"
        assert "--slot-save-path" in r.json()["error"]["message"]
    assert client.post("/slots/0?action=shred").status_code == 400
    assert client.post(f"/slots/{2 * PARALLEL}?action=erase").status_code == 400
    assert client.post("/slots/abc?action=erase").status_code == 400


def test_tokenize_defaults_and_pieces_as_llama_cpp(client: TestClient) -> None:
    """llamacpp.md, `POST /v1/tokenize`: `add_special` "Default: `false`",
    `parse_special` "Default: `true`", `with_pieces` returns `{"id", "piece"}` objects
    (llama.cpp gives a piece's bytes when they are not valid UTF-8)."""
    assert client.post("/tokenize", json={"content": "ab"}).json() == {"tokens": [97, 98]}
    with_bos = client.post("/tokenize", json={"content": "ab", "add_special": True}).json()
    assert with_bos["tokens"] == [BOS, 97, 98]
    pieces = client.post(
        "/tokenize", json={"content": "aé", "add_special": True, "with_pieces": True}
    ).json()["tokens"]
    assert pieces == [
        {"id": BOS, "piece": "<s>"},
        {"id": 97, "piece": "a"},
        {"id": 0xC3, "piece": [0xC3]},
        {"id": 0xA9, "piece": [0xA9]},
    ]
    bad = client.post("/tokenize", json={"content": "ab", "with_pieces": "yes"})
    assert bad.status_code == 400
