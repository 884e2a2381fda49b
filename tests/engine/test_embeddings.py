"""Embeddings (all-MiniLM-L6-v2 converted to GGUF) and reranking (cross-encoder shape)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler.engine.worker.embed import group_inputs, l2_normalize
from tests.engine.conftest import Backend, start_backend

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A monkey is playing drums.",
]


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_group_inputs_respects_sequence_and_token_limits() -> None:
    assert group_inputs([3, 3, 3], max_seqs=2, max_tokens=100) == [[0, 1], [2]]
    assert group_inputs([60, 50, 10], max_seqs=8, max_tokens=100) == [[0], [1, 2]]
    assert group_inputs([], max_seqs=8, max_tokens=100) == []


def test_l2_normalize() -> None:
    assert l2_normalize([3.0, 4.0]) == [0.6, 0.8]
    assert l2_normalize([0.0, 0.0]) == [0.0, 0.0]


@pytest.fixture(scope="module")
def embed_backend(minilm_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    b = start_backend(minilm_gguf, "minilm", tmp_path_factory.mktemp("logs"), "--type", "embedding")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def rerank_backend(
    rerank_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    b = start_backend(
        rerank_gguf, "reranker", tmp_path_factory.mktemp("logs"), "--type", "reranking"
    )
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.slow
def test_minilm_embeddings_are_normalized_and_meaningful(embed_backend: Backend) -> None:
    with embed_backend.client() as c:
        r = c.post("/v1/embeddings", json={"model": "minilm", "input": SENTENCES})
        assert r.status_code == 200, r.text
        body = r.json()
        single = c.post("/v1/embeddings", json={"input": SENTENCES[1]}).json()
    assert body["object"] == "list" and body["model"] == "minilm"
    vecs = [d["embedding"] for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3]
    assert all(len(v) == 384 for v in vecs)
    assert all(abs(math.sqrt(cos(v, v)) - 1.0) < 1e-4 for v in vecs)
    assert body["usage"]["prompt_tokens"] > 4 * 3
    assert cos(vecs[0], vecs[1]) > 0.6  # sentence-transformers reports 0.76
    assert cos(vecs[0], vecs[2]) < 0.2 and cos(vecs[0], vecs[3]) < 0.2
    # One input alone gives the same vector as inside a batch.
    assert cos(single["data"][0]["embedding"], vecs[1]) > 0.9999


@pytest.mark.slow
def test_embedding_backend_refuses_chat(embed_backend: Backend) -> None:
    with embed_backend.client() as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 400
        assert c.get("/health").json()["type"] == "embedding"


@pytest.mark.slow
def test_rerank_sorts_by_score_with_lemonade_shape(rerank_backend: Backend) -> None:
    docs = ["Bread is food.", "Drums are loud.", "Bread is food.", "A baby sleeps."]
    with rerank_backend.client() as c:
        body = c.post(
            "/v1/rerank", json={"model": "reranker", "query": "What do men eat?", "documents": docs}
        ).json()
        top = c.post(
            "/v1/reranking",
            json={
                "query": "What do men eat?",
                "documents": docs,
                "top_n": 2,
                "return_documents": False,
            },
        ).json()
    assert body["model"] == "reranker" and body["object"] == "list"
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    by_index = {r["index"]: r for r in results}
    assert by_index[0]["relevance_score"] == pytest.approx(by_index[2]["relevance_score"], abs=1e-5)
    assert by_index[1]["relevance_score"] != pytest.approx(by_index[3]["relevance_score"], abs=1e-6)
    assert by_index[1]["document"]["text"] == docs[1]
    assert body["usage"]["prompt_tokens"] > 0
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert all("document" not in r for r in top["results"])


def vectors(c: httpx.Client, value: Any) -> list[list[float]]:
    r = c.post("/v1/embeddings", json={"input": value})
    assert r.status_code == 200, r.text
    return [d["embedding"] for d in r.json()["data"]]


@pytest.mark.slow
def test_token_ids_reach_the_model_as_tokens_in_all_four_input_forms(
    embed_backend: Backend,
) -> None:
    """Issue 24: "Accept all four input forms the OpenAI API defines (string, array of
    strings, array of token ids, array of arrays of token ids). Token ids are ids of the
    embedding model's own vocabulary [...] they must reach the engine as tokens, not be
    detokenized into lossy text". The ids of a text (its special tokens included, as
    /tokenize gives them) embed to the text's own vector; usage counts them."""
    with embed_backend.client() as c:
        ids = [
            c.post("/tokenize", json={"content": s, "add_special": True}).json()["tokens"]
            for s in SENTENCES[:2]
        ]
        by_text = vectors(c, SENTENCES[:2])
        assert cos(vectors(c, SENTENCES[0])[0], by_text[0]) > 0.9999
        assert cos(vectors(c, ids[0])[0], by_text[0]) > 0.9999
        by_ids = vectors(c, ids)
        assert all(cos(a, b) > 0.9999 for a, b in zip(by_ids, by_text, strict=True))
        used = c.post("/v1/embeddings", json={"input": ids}).json()["usage"]["prompt_tokens"]
        assert used == len(ids[0]) + len(ids[1])
        # Without its [CLS] and [SEP] a sequence is another sequence: embedded as given.
        bare = vectors(c, ids[0][1:-1])[0]
        assert 0.5 < cos(bare, by_text[0]) < 0.9999


@pytest.mark.slow
def test_bad_token_ids_and_forms_are_refused_naming_input(embed_backend: Backend) -> None:
    """Issue 24: "out-of-range id -> 400 naming `input`"; an empty list, mixed types,
    negative ids and lists over the input cap are 400 too."""
    with embed_backend.client() as c:
        for value in (
            [101, 10**6, 102],
            [[101, 102], [101, 2**40]],
            [],
            [[]],
            [101, -1, 102],
            ["a", 101],
            [[101], "a"],
            [101, 1.5],
            [True, 101],
            ["x"] * 2049,
            [7] * 65537,
        ):
            r = c.post("/v1/embeddings", json={"input": value})
            assert r.status_code == 400, (value, r.text)
            assert r.json()["error"]["param"] == "input", r.text
