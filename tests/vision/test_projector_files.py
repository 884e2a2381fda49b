"""Which projector loads with a model, and how its launch counts it (issue 51): "A GGUF
with its projector (`mmproj-*.gguf` beside it ...) loads as one model ... The
projector's memory is counted with the model.\""""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.errors import CheckpointMissing
from juggler.manager.projector_launch import projector_argv, with_projector
from juggler.manager.recipes import plan_launch
from juggler.registry.gguf_meta import read_info
from juggler.registry.mmproj import labels_of, projector_for, takes_images
from juggler.types import ModelInfo
from tests.manager.conftest import resolve_path, settings
from tests.manager.test_fit import smol_like
from tests.vision.projector import make_projector


def test_a_projector_beside_the_model_is_found_and_optional(tmp_path: Path) -> None:
    model = smol_like(tmp_path / "m.gguf")
    info = ModelInfo(name="M", checkpoint=str(model))
    assert projector_for(info, model) is None and not takes_images(info)
    make_projector(tmp_path / "mmproj-m-f16.gguf")
    found = projector_for(info, model)
    assert found is not None and found.path.name == "mmproj-m-f16.gguf" and found.optional
    assert takes_images(info) and labels_of(info)[-1] == "vision"


def test_a_named_projector_must_be_there(tmp_path: Path) -> None:
    model = smol_like(tmp_path / "m.gguf")
    named = ModelInfo(name="M", checkpoint=str(model), mmproj="mmproj-x.gguf")
    with pytest.raises(CheckpointMissing, match="mmproj-x.gguf"):
        projector_for(named, model)
    make_projector(tmp_path / "mmproj-x.gguf")
    found = projector_for(named, model)
    assert found is not None and not found.optional
    assert projector_argv(found) == ["--mmproj", str(tmp_path / "mmproj-x.gguf")]


def test_the_launch_names_the_projector_and_counts_its_bytes(tmp_path: Path) -> None:
    model = smol_like(tmp_path / "m.gguf")
    proj = make_projector(tmp_path / "mmproj-m.gguf")
    found = projector_for(ModelInfo(name="M", checkpoint=str(model)), model)
    header = read_info(model)
    counted = with_projector(header, found)
    assert counted is not None and counted.size_bytes == header.size_bytes + proj.stat().st_size
    options = settings().model_options({"ctx_size": 2048})
    plan = plan_launch(
        ModelInfo(name="M", checkpoint=str(model)), options, settings(), resolve_path
    )
    argv = list(plan.argv_template)
    assert argv[argv.index("--mmproj") + 1] == str(proj)
    assert "--mmproj-optional" in argv
