"""Embeddings (all-MiniLM-L6-v2 converted to GGUF) and reranking (cross-encoder shape)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

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
