"""Issue 24, item 6: Lemonade's HTTP contract at its commit (reference/lemonade/), against a
real router and real backends: health's `telemetry` and `launch_command`, load options
on an inference body, `cache_tokens`, the idle evaluation, a pin across a watchdog reload,
`/slots` and `/tokenize` as llama.cpp defines them, and the `lemonade_*` metric families.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow
HELLO = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("contract"), "--model", "", "--ctx-size", "1024")
    try:
        yield srv
    finally:
        srv.stop()


def sdk(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/api/v1", api_key="none", max_retries=0)


def loaded(server: RunningServer, name: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = server.health()["all_models_loaded"]  # type: ignore[assignment]
    return next((m for m in entries if m["model_name"] == name), None)


def test_health_telemetry_and_launch_command_as_a_list(server: RunningServer) -> None:
    """lemonade.md, health: "`telemetry` - Structured telemetry state object: `enabled` -
    Boolean indicating if telemetry collection is active; `captures` - *(optional)* ...
    only present when `enabled` is `true`", and "`launch_command` - The command used to
    start the backend engine, as an array with the program first and its arguments after
    it"."""
    with server.client() as c:
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        health = c.get("/api/v1/health").json()
    assert health["telemetry"] == {"enabled": False}
    entry = next(m for m in health["all_models_loaded"] if m["model_name"] == DEFAULT_MODEL)
    command = entry["launch_command"]
    assert isinstance(command, list) and all(isinstance(part, str) for part in command)
    assert "python" in command[0].rsplit("/", 1)[-1], "the program comes first"
    port = command[command.index("--port") + 1]
    assert urlsplit(entry["backend_url"]).port == int(port)
    # The backend runs the resolved file: the checkpoint's file name is in its arguments.
    file_name = entry["checkpoint"].split(":")[-1].rsplit("/", 1)[-1]
    assert any(file_name in part for part in command), command


def test_load_options_on_a_chat_body_reach_the_auto_load_only_through_the_allowlist(
    server: RunningServer,
) -> None:
    """Issue 24: "a chat/completions body may carry Lemonade's load options (`pinned`,
    `ctx_size`, ...): only the allowlisted ones reach the auto-load, the request is
    served" (Lemonade's server keeps "an explicit allowlist so request-scoped fields do
    not leak into recipe options": `ctx_size`)."""
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        body = {
            "model": DEFAULT_MODEL,
            "messages": HELLO,
            "max_tokens": 5,
            "temperature": 0.99,
            "seed": 42,
            "pinned": True,
            "llamacpp_args": "--foo-bar",
            "auto_evict": True,
            "evict_idle_timeout": 1,
            "ctx_size": 768,
            "max_completion_tokens": 5,
        }
        r = c.post("/api/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        entry = loaded(server, DEFAULT_MODEL)
        assert entry is not None
        options = entry["recipe_options"]
        assert options["ctx_size"] == 768
        # Lemonade's suite: the request-scoped fields "must NOT leak into recipe_options".
        assert entry["pinned"] is False and "--foo-bar" not in options["llamacpp_args"]
        assert not {"pinned", "auto_evict", "evict_idle_timeout"} & set(options), options
        # A loaded model keeps its options: the next body's ctx_size changes nothing.
        again = c.post("/api/v1/chat/completions", json={**body, "ctx_size": 512})
        after = loaded(server, DEFAULT_MODEL)
        assert again.status_code == 200 and after is not None
        assert (after["pid"], after["recipe_options"]) == (entry["pid"], options)
        bad = c.post(
            "/api/v1/completions", json={"model": DEFAULT_MODEL, "prompt": "a", "ctx_size": 1}
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "ctx_size"


def test_stats_cache_tokens_and_totals_since_start(server: RunningServer) -> None:
    """lemonade.md, /stats: "`cache_tokens` - Prompt tokens served from the backend's
    prefix cache on the last request" and "`*_total` - Cumulative counters since server
    start" (Lemonade's suite: "A repeated conversation prefix surfaces cache_tokens")."""
    history = [
        {"role": "system", "content": "You are a concise assistant. " + "Context filler. " * 30},
        {"role": "user", "content": "Reply with the single word: ready."},
    ]
    with server.client() as c:
        before = c.get("/api/v1/stats").json()
        for messages in (history, [*history, {"role": "assistant", "content": "ready"}]):
            body = {"model": DEFAULT_MODEL, "messages": messages, "max_tokens": 4}
            assert c.post("/api/v1/chat/completions", json=body).status_code == 200
        stats = c.get("/api/v1/stats").json()
        assert stats["cache_tokens"] > 0 and stats["cache_tokens"] <= stats["prompt_tokens"]
        assert stats["request_count_total"] == before["request_count_total"] + 2
        assert stats["cache_tokens_total"] >= before["cache_tokens_total"] + stats["cache_tokens"]
        assert stats["output_tokens_total"] > before["output_tokens_total"]
        assert stats["prompt_tokens_total"] == stats["input_tokens_total"]
        assert stats["routing_decisions_total"] == stats["routing_switches_total"] == 0
        # Totals never go down: the backend that counted them is gone.
        assert c.post("/api/v1/unload", json={}).status_code == 200
        after = c.get("/api/v1/stats").json()
        for key in ("request_count_total", "cache_tokens_total", "output_tokens_total"):
            assert after[key] == stats[key], key


def test_responses_record_telemetry_with_cache_tokens(server: RunningServer) -> None:
    """Issue 24: "`cache_tokens` in the per-request telemetry of `/api/v1/stats` and
    Responses" (Lemonade's suite: "Non-streaming Responses requests record telemetry
    like chat does")."""
    with sdk(server) as client:
        for _ in range(2):
            response = client.responses.create(
                model=DEFAULT_MODEL,
                instructions="You are a concise assistant. " + "Context filler. " * 30,
                input="Say hello.",
                max_output_tokens=8,
                temperature=0.0,
            )
    assert response.usage is not None
    cached = response.usage.input_tokens_details.cached_tokens
    with server.client() as c:
        stats = c.get("/api/v1/stats").json()
    assert stats["input_tokens"] > 0 and stats["output_tokens"] > 0
    assert isinstance(stats["cache_tokens"], int) and stats["cache_tokens"] == cached


def test_metrics_has_lemonade_families_beside_vllm_ones(server: RunningServer) -> None:
    """lemonade.md, /metrics: "`HEAD /metrics` is also supported and returns `200 OK`
    with an empty body"; Lemonade's suite expects `lemonade_server_up 1`,
    `lemonade_loaded_models`, `lemonade_max_loaded_models`, and the loaded model in
    `lemonade_model_info`; issue 24: "the `lemonade_*` metric families next to the vLLM
    ones"."""
    with server.client() as c:
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        r = c.get("/metrics")
        head = c.head("/metrics")
    assert r.status_code == 200 and "text/plain" in r.headers["content-type"]
    assert re.search(r"(?m)^lemonade_server_up 1(?:\.0+)?$", r.text)
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(dict(s.labels))
    for name in (
        "lemonade_loaded_models",
        "lemonade_max_loaded_models",
        "vllm:num_requests_waiting",
    ):
        assert name in samples, name
    assert any(lab["model_name"] == DEFAULT_MODEL for lab in samples["lemonade_model_info"])
    for series in ("lemonade_cache_tokens_total", "lemonade_routing_switches_total"):
        assert series in samples
    assert head.status_code == 200 and head.content == b""


def test_downsize_idle_timeout_zero_waits_for_the_evaluation(server: RunningServer) -> None:
    """Issue 24: "`downsize_idle_timeout=0` and the synchronous idle evaluation semantics
    (a model is `ready` right after load; when the evaluation call answers, the downsize
    is done)"; Lemonade's suite: "A request against a downsized model transparently
    restores it"."""
    load = {
        "model_name": DEFAULT_MODEL,
        "ctx_size": 256,
        "auto_evict": True,
        "downsize_idle_timeout": 0,
        "evict_idle_timeout": 300,
    }
    with server.client() as c:
        assert c.post("/api/v1/load", json=load).status_code == 200
        assert loaded(server, DEFAULT_MODEL)["status"] == "ready"  # type: ignore[index]
        r = c.post("/internal/simulate-vram-pressure", json={"pct": -1})
        assert r.status_code == 200, r.text
        assert loaded(server, DEFAULT_MODEL)["status"] == "downsized"  # type: ignore[index]
        body = {"model": DEFAULT_MODEL, "messages": HELLO, "max_tokens": 1}
        assert c.post("/api/v1/chat/completions", json=body).status_code == 200
        assert loaded(server, DEFAULT_MODEL)["status"] in ("ready", "in_use")  # type: ignore[index]
        c.post("/api/v1/unload", json={})


def test_a_pin_survives_a_watchdog_reload(server: RunningServer) -> None:
    """Issue 24: "a pin survives a watchdog reload" (Lemonade's suite: "Watchdog reloads
    preserve the pinning status of the crashed backend": SIGKILL, a chat at once, then a
    fresh pid and `pinned` still true)."""
    with server.client() as c:
        load = {"model_name": DEFAULT_MODEL, "pinned": True, "ctx_size": 640}
        assert c.post("/api/v1/load", json=load).status_code == 200
        old = loaded(server, DEFAULT_MODEL)
        assert old is not None and old["pinned"] is True
        os.kill(old["pid"], signal.SIGKILL)
        with sdk(server) as client:
            reply = client.chat.completions.create(
                model=DEFAULT_MODEL, messages=HELLO, max_tokens=4
            )  # type: ignore[arg-type]
        assert reply.choices
        new = loaded(server, DEFAULT_MODEL)
        assert new is not None and new["pid"] != old["pid"]
        assert new["pinned"] is True and new["recipe_options"]["ctx_size"] == 640
        c.post("/internal/pin", json={"model_name": DEFAULT_MODEL, "pinned": False})
        c.post("/api/v1/unload", json={})


def test_effective_options_replay_as_the_same_load(server: RunningServer) -> None:
    """lemonade.md: "`effective` is the exact request body a `POST /v1/load` for this
    model uses right now" (Lemonade's suite: replaying `effective` after the saved
    options are erased "must resolve to the same load": the same pid)."""
    url = f"/api/v1/models/{DEFAULT_MODEL}/options"
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        saved = c.post(url, json={"ctx_size": 896, "llamacpp_args": "--workers 1"})
        assert saved.status_code == 200, saved.text
        assert loaded(server, DEFAULT_MODEL) is None, "saving never loads"
        effective = c.get(url).json()["effective"]
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        before = loaded(server, DEFAULT_MODEL)
        assert before is not None and before["recipe_options"]["ctx_size"] == 896
        assert c.delete(url).json()["saved"] == {}
        assert c.post("/api/v1/load", json=effective).status_code == 200
        after = loaded(server, DEFAULT_MODEL)
        assert after is not None and after["pid"] == before["pid"]
        c.post("/api/v1/unload", json={})


def test_an_alias_serves_requests_with_its_model(server: RunningServer) -> None:
    """lemonade.md: `POST /internal/aliases` "Binds a model alias to a target model
    name": a request naming the alias is served by the model (one backend, under the
    model's own name)."""
    with server.client() as c:
        assert c.post(
            "/internal/aliases", json={"alias": "chatty", "target": DEFAULT_MODEL}
        ).is_success
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        pid = loaded(server, DEFAULT_MODEL)["pid"]  # type: ignore[index]
        body = {"model": "chatty", "messages": HELLO, "max_tokens": 2}
        assert c.post("/api/v1/chat/completions", json=body).status_code == 200
        names = [m["model_name"] for m in server.health()["all_models_loaded"]]  # type: ignore[attr-defined]
        assert names == [DEFAULT_MODEL] and loaded(server, DEFAULT_MODEL)["pid"] == pid  # type: ignore[index]
        c.delete("/internal/aliases/chatty")


def test_slots_and_tokenize_through_the_router(server: RunningServer) -> None:
    """llamacpp.md: `/slots` "Returns the current state of all processing slots" and "is
    only available when a llama.cpp model is loaded"; `erase` answers `{"id_slot"}`;
    `/tokenize` with `with_pieces` answers `{"id", "piece"}` objects. Lemonade forwards
    them to the loaded model, so the body may name none."""
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        none = c.get("/api/v1/slots")
        assert none.status_code == 400 and none.json()["error"]["param"] == "model"
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        seen: list[str] = []
        body = {"model": DEFAULT_MODEL, "messages": HELLO, "max_tokens": 60, "stream": True}
        with c.stream("POST", "/api/v1/chat/completions", json=body) as r:
            for _ in r.iter_lines():
                if not seen or seen[-1] != "processing":
                    seen += [s["state"] for s in c.get("/api/v1/slots").json()]
        assert "processing" in seen, "a slot was processing while the stream ran"
        got = c.get("/v1/slots").json()
        assert isinstance(got, list) and all(isinstance(s["id"], int) for s in got)
        slot = next(s for s in got if s["cache_tokens"] > 0)
        erased = c.post(f"/api/v1/slots/{slot['id']}?action=erase")
        assert erased.status_code == 200 and erased.json()["id_slot"] == slot["id"]
        saved = c.post("/api/v1/slots/0?action=save", json={"filename": "x.bin"})
        assert saved.status_code == 501 and "--slot-save-path" in saved.text
        plain = c.post("/api/v1/tokenize", json={"content": "Hello world!"}).json()
        pieces = c.post("/api/v1/tokenize", json={"content": "Hello world!", "with_pieces": True})
        assert [t["id"] for t in pieces.json()["tokens"]] == plain["tokens"]
        assert "".join(t["piece"] for t in pieces.json()["tokens"]) == "Hello world!"


def test_a_streamed_response_cut_by_its_budget_is_incomplete_as_openai_defines(
    server: RunningServer,
) -> None:
    """Issue 24: "Where Lemonade's suite and the official OpenAI definition disagree (a
    streamed Response that hits its token budget: the suite expects
    `response.completed`, OpenAI defines `response.incomplete`), follow OpenAI"."""
    with sdk(server) as client:
        stream = client.responses.create(
            model=DEFAULT_MODEL,
            input="Count from one to twenty, in words.",
            max_output_tokens=3,
            temperature=0.0,
            stream=True,
        )
        with stream:
            events = list(stream)
    assert events[0].type == "response.created"
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
