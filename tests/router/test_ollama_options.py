"""Ollama's per-request options (issue 25): `options` and `keep_alive` are "parsed once,
in the dialect's adapter, into one typed object" (`OllamaRequestOptions`), before
anything is loaded; no model needed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.errors import BadRequest, NotImplementedParam
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.ollama import options as oo
from juggler.router.ollama import request as rq
from juggler.router.ollama import wire as ol

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"
MODEL = "SmolLM2-135M-Instruct-GGUF"


def test_options_and_keep_alive_are_one_typed_object() -> None:
    """Issue 25: "Per-request options (Ollama `options`, `keep_alive` ...) are parsed once
    ... into one typed object": sampling for the body, load options for the model (only
    `num_ctx` of Lemonade's load options reaches it), keep_alive in seconds."""
    body = ol.ChatBody(
        model="m",
        options={"temperature": 0.5, "num_ctx": 2048, "pinned": True, "num_thread": 2},
        keep_alive="5m",
    )
    got = rq.request_options(body)
    assert got.sampling == {"temperature": 0.5}
    assert got.load == {"ctx_size": 2048, "llamacpp_args": "--threads 2"}
    assert got.keep_alive_s == 300.0
    assert got.residency() == oo.keep_alive_options(300.0)
    assert not got.unloads
    assert rq.openai_body("m", {"messages": []}, got)["temperature"] == 0.5


def test_without_keep_alive_the_models_residency_is_left_alone() -> None:
    """Ollama: keep_alive is "how long the model will stay loaded into memory following
    the request"; a request that does not say leaves the model's own timeouts."""
    got = oo.OllamaRequestOptions.read(None, None)
    assert got.residency() == {} and got.keep_alive_s is None and not got.unloads
    assert oo.OllamaRequestOptions.read(None, 0).unloads
    assert oo.OllamaRequestOptions.read(None, "-1").residency()["auto_evict"] is False


def test_a_bad_option_or_keep_alive_is_refused_when_read() -> None:
    """A parameter Juggler cannot honour is a 400 naming it, at the one reading."""
    with pytest.raises(NotImplementedParam) as err:
        oo.OllamaRequestOptions.read({"mirostat": 2}, None)
    assert err.value.param == "options.mirostat"
    with pytest.raises(BadRequest) as bad:
        oo.OllamaRequestOptions.read({"num_ctx": 1024}, "5 minutes")
    assert bad.value.param == "keep_alive"
    with pytest.raises(NotImplementedParam) as sampling:
        oo.OllamaRequestOptions.read({"temperature": 0.1}, None).refuse_sampling("no")
    assert sampling.value.param == "options.temperature"


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model=""), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("route", "extra"),
    [
        ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/api/chat", {"messages": []}),
        ("/api/generate", {"prompt": "hi"}),
        ("/api/embed", {"input": "hi"}),
    ],
)
def test_a_bad_keep_alive_loads_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, route: str, extra: dict[str, Any]
) -> None:
    """Read once, before any work: a request with load options and a keep_alive that is
    no duration is a 400 naming keep_alive, and the model is not loaded first."""
    loads: list[str] = []

    async def load(name: str, options: Any = None) -> None:
        loads.append(name)

    manager = client.app.state.juggler.manager  # type: ignore[attr-defined]
    monkeypatch.setattr(manager, "load", load)
    body = {"model": MODEL, "options": {"num_ctx": 1024}, "keep_alive": "5 minutes", **extra}
    r = client.post(route, json=body)
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]
    assert loads == []
