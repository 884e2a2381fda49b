"""Seed 004's metrics on a live router with real backends, parsed with
`prometheus_client`'s own parser as the endpoint picker's would be.

Issue 12, "Done when": "waiting rises while a model loads, running during streams, KV
usage rises with a long session and falls after it ends"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("metrics"), "--model", "", "--max-loaded-models", "-1"
    )
    try:
        yield srv
    finally:
        srv.stop()


def scrape(c: httpx.Client) -> dict[str, float]:
    """The first (server-wide) sample of every family, as the endpoint picker reads it."""
    r = c.get("/metrics")
    assert r.status_code == 200 and r.text.endswith("\n")
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, s.value)
    return out


def until(
    c: httpx.Client, check: Callable[[dict[str, float]], bool], timeout_s: float = 60
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check(scrape(c)):
            return
        time.sleep(0.05)  # the picker's own 50 ms
    raise AssertionError(f"metrics never matched: {scrape(c)}")


def in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn)
    t.start()
    return t


def test_waiting_while_a_model_loads_and_running_while_it_streams(server: RunningServer) -> None:
    body = {"model": GEMMA, "prompt": "Once upon a time", "max_tokens": 120, "temperature": 0}
    with server.client() as c:
        assert scrape(c)["vllm:num_requests_waiting"] == 0

        def load_and_complete() -> None:
            with server.client() as s:
                s.post("/v1/completions", json=body)

        first = in_thread(load_and_complete)
        until(c, lambda m: m["vllm:num_requests_waiting"] >= 1)  # waiting for the load
        first.join()
        stream = {**body, "stream": True, "max_tokens": 400, "ignore_eos": True}

        def streamed() -> None:
            with server.client() as s, s.stream("POST", "/v1/completions", json=stream) as r:
                for _ in r.iter_lines():
                    pass

        t = in_thread(streamed)
        until(c, lambda m: m["vllm:num_requests_running"] >= 1)
        until(c, lambda m: m["vllm:num_tokens_running"] > 0)
        t.join()
        until(c, lambda m: m["vllm:num_requests_running"] == 0)
        # A request's latencies are recorded when its end reaches the backend's master,
        # which may be a poll after its worker stopped counting it as running.
        until(c, lambda m: m["vllm:time_to_first_token_seconds_count"] >= 2)
        after = scrape(c)
        assert after["vllm:generation_tokens_total"] >= 120
        assert after["vllm:time_per_output_token_seconds_count"] >= 100


def test_kv_usage_rises_with_a_long_session_and_falls_after_it_ends(
    server: RunningServer,
) -> None:
    with server.client() as c:
        c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL, "ctx_size": 2048})
        until(c, lambda m: m["vllm:max_token_capacity"] > 0)
        before = scrape(c)["vllm:kv_cache_usage_perc"]
        sid = c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"]
        long_text = "The quick brown fox jumps over the lazy dog. " * 60
        c.post(f"/api/v1/sessions/{sid}/input", json={"text": long_text})
        with c.stream("POST", f"/api/v1/sessions/{sid}/generate", json={"max_new_tokens": 2}) as r:
            for _ in r.iter_lines():
                pass
        # The session holds about 600 cells, whatever the capacity of every backend's
        # workers together is.
        cells = 400

        def risen(m: dict[str, float]) -> bool:
            return m["vllm:kv_cache_usage_perc"] > before + cells / m["vllm:max_token_capacity"]

        until(c, risen)
        c.delete(f"/api/v1/sessions/{sid}")
        until(c, lambda m: m["vllm:kv_cache_usage_perc"] <= before + 0.01)
