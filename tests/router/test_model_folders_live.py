"""Issue 49, part 3, through a real router and real backends: a GGUF in the model
folders "loads on first use, without a pull", by its name and its Ollama name, with the
published `openai` and `ollama` clients; a split copy of SmolLM2 (`-00001-of-00003`) is one
model that answers as the original; a file put there later is listed without a restart."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest
from openai import OpenAI

from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import resolve_checkpoint
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.gguf_copy import copy_gguf

pytestmark = pytest.mark.slow

PROMPT = "What is the capital of France?"


def smol_file() -> Path:
    return resolve_checkpoint(Registry().get(DEFAULT_MODEL))


def place(src: Path, dest: Path) -> None:
    """`src` at `dest` as a file of its own (a hard link where the file system allows)."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("models")
    place(smol_file(), d / "smol-copy-Q4_1.gguf")
    (d / "split").mkdir()
    copy_gguf(smol_file(), d / "split" / "smol-split.gguf", split_max_tensors=100)
    return d


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[RunningServer]:
    env = {"JUGGLER_MODEL_DIRS": str(folder)}
    srv = start_server(tmp_path_factory.mktemp("mf"), "--model", "", "--ctx-size", "1024", env=env)
    try:
        yield srv
    finally:
        srv.stop()


def greedy(server: RunningServer, model: str) -> str:
    with OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0) as client:
        answer = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            temperature=0,
            max_tokens=12,
        )
    return answer.choices[0].message.content or ""


def test_a_found_file_loads_on_first_use_by_either_name(server: RunningServer) -> None:
    with OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0) as client:
        listed = {m.id for m in client.models.list()}
    assert {"extra.smol-copy-Q4_1", "extra.smol-split"} <= listed
    original = greedy(server, DEFAULT_MODEL)
    assert greedy(server, "extra.smol-copy-Q4_1") == original
    loaded = [m["model_name"] for m in server.health()["all_models_loaded"]]  # type: ignore[union-attr]
    assert "extra.smol-copy-Q4_1" in loaded
    with ollama.Client(host=server.base_url) as client:
        assert "smol-copy:Q4_1" in {m.model for m in client.list().models}
        reply = client.chat(
            model="smol-copy:Q4_1",
            messages=[{"role": "user", "content": PROMPT}],
            options={"temperature": 0, "num_predict": 12},
        )
    assert reply.message.content == original


def test_a_split_model_is_one_model_that_answers_as_the_whole(server: RunningServer) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        entry = c.get("/api/v1/models/extra.smol-split").json()
    assert entry["size"] == pytest.approx(smol_file().stat().st_size / 1e9, rel=0.01)
    assert greedy(server, "extra.smol-split") == greedy(server, DEFAULT_MODEL)


def test_a_file_put_there_later_is_listed_without_a_restart(
    server: RunningServer, folder: Path
) -> None:
    place(smol_file(), folder / "later.gguf")
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        while True:
            names = {m["id"] for m in c.get("/api/v1/models").json()["data"]}
            if "extra.later" in names:
                break
            assert time.monotonic() < deadline, names
            time.sleep(0.2)
        tags = {m["name"] for m in c.get("/api/tags").json()["models"]}
    assert "later:latest" in tags
