"""LoRA adapters end to end (seed 004): a real router, SmolLM2 backends, and two GGUF
LoRA adapters made for SmolLM2 by the test (`gguf_models.make_lora`).

Seed 004, "Dynamic LoRA Serving": "Support running multiple LoRA adapters in parallel in
the same decode batch" and "MaxActiveAdapter [...] Requests will be queued if the model
server has reached MaxActiveAdapter and cannot load the requested adapter." Its
reference API: `GET /adapters/info`, `POST /adapters/{adapter-id} {"path"}`, `DELETE
/adapters/{adapter-id}`; vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import gguf
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, start_server
from tests.engine.conftest import smollm2_path
from tests.engine.gguf_models import make_lora

pytestmark = pytest.mark.slow

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = smollm2_path()
    assert base is not None
    tmp = tmp_path_factory.mktemp("lora")
    srv = start_server(tmp, "--model", DEFAULT_MODEL, "--ctx-size", "1024")
    models = srv.home / "models"  # Juggler's model cache: no admin key needed
    models.mkdir(exist_ok=True)
    make_lora(base, models / "a.gguf", seed=1)
    make_lora(base, models / "b.gguf", seed=2)
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield srv
    finally:
        srv.stop()


def complete(c: httpx.Client, model: str, max_tokens: int = 12, **more: Any) -> str:
    """A greedy completion, without speculative drafts: the tests compare repeated
    answers, and a repeat is drafted from the adapter's earlier answer, verified in one
    decode of many rows whose rounding parts the near-ties of these random adapters (the
    drafts themselves are `test_speculation`'s)."""
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "speculative": False,
    }
    r = c.post("/v1/completions", json={**body, **more})
    assert r.status_code == 200, r.text
    text: str = r.json()["choices"][0]["text"]
    return text


def lora_info(c: httpx.Client) -> dict[str, str]:
    text = c.get("/metrics").text
    for fam in text_string_to_metric_families(text):
        if fam.name == "vllm:lora_requests_info":
            return dict(fam.samples[0].labels)
    raise AssertionError("no vllm:lora_requests_info")


def until(check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met")


def test_an_adapter_changes_greedy_output_and_unregistering_restores_it(
    server: RunningServer,
) -> None:
    models = server.home / "models"
    with server.client() as c:
        base = complete(c, DEFAULT_MODEL)
        r = c.post(
            "/adapters/a", json={"path": str(models / "a.gguf"), "base_model": DEFAULT_MODEL}
        )
        assert r.status_code == 200, r.text
        r = c.post(
            "/v1/load_lora_adapter", json={"lora_name": "b", "lora_path": str(models / "b.gguf")}
        )
        assert r.status_code == 200, r.text  # base_model defaults to the default model
        listed = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        assert listed["a"]["parent"] == listed["b"]["parent"] == DEFAULT_MODEL
        out_a, out_b = complete(c, "a"), complete(c, "b")
        assert len({base, out_a, out_b}) == 3, (base, out_a, out_b)
        assert complete(c, "a") == out_a  # deterministic, and the base is untouched:
        assert complete(c, DEFAULT_MODEL) == base
        info = c.get("/adapters/info").json()
        assert info["config"] == {"enabled": True, "maxActiveAdapters": 4}
        assert set(info["state"]["activeAdapters"]) == {"a", "b"}
        # A chat session runs every turn with its adapter.
        sid = c.post("/v1/sessions", json={"model": "a"}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/input", json={"text": PROMPT})
        with c.stream(
            "POST",
            f"/v1/sessions/{sid}/generate",
            json={"max_new_tokens": 12, "temperature": 0, "speculative": False},
        ) as s:
            text = "".join(
                json.loads(line[6:]).get("text", "")
                for line in s.iter_lines()
                if line.startswith("data: {")
            )
        assert text == out_a
        assert c.delete(f"/v1/sessions/{sid}").status_code == 200

        assert c.delete("/adapters/a").status_code == 200
        assert c.post("/v1/unload_lora_adapter", json={"lora_name": "b"}).status_code == 200
        r = c.post("/v1/completions", json={"model": "a", "prompt": PROMPT, "max_tokens": 4})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert complete(c, DEFAULT_MODEL) == base
        assert c.get("/adapters/info").json()["state"]["activeAdapters"] == []


def test_two_adapters_in_flight_at_once_each_give_their_own_output(server: RunningServer) -> None:
    models = server.home / "models"
    with server.client() as c:
        for name in ("a", "b"):
            path = str(models / f"{name}.gguf")
            assert c.post(f"/adapters/{name}", json={"path": path}).status_code == 200
        alone = {name: complete(c, name, max_tokens=48) for name in ("a", "b")}
        got: dict[str, str] = {}

        def run(name: str) -> None:
            with server.client() as own:
                got[name] = complete(own, name, max_tokens=48)

        threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        until(lambda: set(lora_info(c)["running_lora_adapters"].split(",")) == {"a", "b"}, 30)
        for t in threads:
            t.join()
        # Greedy text is the same as alone until float noise from the other sequence's
        # KV cells (wider attention) may flip a near tie: compare the first words.
        for name in ("a", "b"):
            assert got[name][:24] == alone[name][:24], (got, alone)
        assert got["a"][:24] != got["b"][:24]
        for name in ("a", "b"):
            assert c.delete(f"/adapters/{name}").status_code == 200


def test_bad_registrations_are_clear_errors(server: RunningServer) -> None:
    models = server.home / "models"
    with server.client() as c:
        r = c.post("/adapters/x", json={"path": str(models / "missing.gguf")})
        assert r.status_code == 400 and "not found" in r.json()["error"]["message"]
        plain = models / "plain.gguf"  # a GGUF that is no adapter
        w = gguf.GGUFWriter(str(plain), "llama")
        w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        r = c.post("/adapters/x", json={"path": str(plain)})
        assert r.status_code == 400 and "not a LoRA adapter" in r.json()["error"]["message"]
        r = c.post("/adapters/x", json={"path": str(models / "a.gguf"), "base_model": GEMMA})
        assert r.status_code == 400 and r.json()["error"]["param"] == "base_model"
        r = c.post("/adapters/x", json={"path": str(models / "a.gguf"), "base_model": "nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        # A file outside the model directories: a browser's request needs the admin key
        # (issue 22); the owner's own script may name any file, and this one is no GGUF.
        mine = {"Origin": server.base_url}
        r = c.post("/adapters/x", json={"path": "/etc/passwd"}, headers=mine)
        assert r.status_code == 403
        r = c.post("/adapters/x", json={"path": "/etc/passwd"})
        assert r.status_code == 400
        assert c.delete("/adapters/never-registered").status_code == 404
        r = c.post("/adapters/..%2Fx", json={"path": str(models / "a.gguf")})
        assert r.status_code in (400, 404)
        r = c.post(
            "/v1/completions",
            json={
                "model": DEFAULT_MODEL,
                "prompt": "x",
                "juggler_adapter": {"id": "a", "path": "/"},
            },
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "juggler_adapter"


def test_the_limit_queues_the_extra_adapter_and_the_lora_series_shows_it(
    server: RunningServer,
) -> None:
    models = server.home / "models"
    with server.client() as c:
        r = c.post(
            "/api/v1/load",
            # One worker: the limit is each worker's (seed 004's MaxActiveAdapter).
            json={
                "model_name": DEFAULT_MODEL,
                "llamacpp_args": "--workers 1 --max-active-adapters 1",
            },
        )
        assert r.status_code == 200, r.text
        for name in ("a", "b"):
            assert (
                c.post(f"/adapters/{name}", json={"path": str(models / f"{name}.gguf")}).status_code
                == 200
            )
        solo_b = complete(c, "b")
        got: dict[str, str] = {}

        def run(name: str, max_tokens: int, **more: Any) -> None:
            try:
                with server.client() as own:
                    got[name] = complete(own, name, max_tokens, **more)
            except BaseException as exc:  # shown by the assertion below
                got[name] = f"failed: {exc!r}"

        # "a" streams until the test has seen "b" wait, then its client leaves: how long
        # "b" waits is up to the test, never a race with a generation's length.
        done_watching = threading.Event()

        def stream_a() -> None:
            body = {"model": "a", "prompt": PROMPT, "max_tokens": 4000, "temperature": 0}
            try:
                with (
                    server.client() as own,
                    own.stream(
                        "POST", "/v1/completions", json={**body, "stream": True, "ignore_eos": True}
                    ) as r,
                ):
                    for _ in r.iter_lines():
                        if done_watching.is_set():
                            break
                got["a"] = "left"
            except BaseException as exc:  # shown by the assertion below
                got["a"] = f"failed: {exc!r}"

        running = threading.Thread(target=stream_a)
        running.start()
        until(lambda: lora_info(c)["running_lora_adapters"] == "a", 30)
        waiter = threading.Thread(target=run, args=("b", 12))
        waiter.start()
        until(lambda: lora_info(c)["waiting_lora_adapters"] == "b", 30)
        info = lora_info(c)
        assert info["max_lora"] == "1" and info["running_lora_adapters"] == "a"
        r = c.delete("/adapters/a")
        assert r.status_code == 409  # in use: its request is not cut off
        done_watching.set()
        running.join()
        waiter.join()
        assert got["a"] == "left", got
        assert got["b"] == solo_b, got
        until(lambda: lora_info(c)["waiting_lora_adapters"] == "", 30)
        assert c.delete("/adapters/a").status_code == 200
        assert c.delete("/adapters/b").status_code == 200


def test_adapters_survive_a_backend_reload(server: RunningServer) -> None:
    models = server.home / "models"
    with server.client() as c:
        assert c.post("/adapters/a", json={"path": str(models / "a.gguf")}).status_code == 200
        before = complete(c, "a")
        assert c.post("/api/v1/unload", json={"model_name": DEFAULT_MODEL}).status_code == 200
        assert complete(c, "a") == before  # the base model loads again, the adapter with it
        assert c.delete("/adapters/a").status_code == 200
