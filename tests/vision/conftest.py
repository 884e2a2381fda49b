"""Fixtures of the vision tests: the random-weight projector beside SmolLM2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import Backend, smol_path, start_backend  # noqa: F401
from tests.vision.projector import make_projector


@pytest.fixture(scope="session")
def projector_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-test.gguf")


@pytest.fixture(scope="module")
def vision_backend(
    smol_path: Path,  # noqa: F811
    projector_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Backend]:
    """SmolLM2 with the test projector: 8 sequences, 4k context, one worker."""
    b = start_backend(
        smol_path,
        "smol-vision",
        tmp_path_factory.mktemp("logs"),
        "--parallel",
        "8",
        "--ctx-size",
        "4096",
        "--mmproj",
        str(projector_path),
    )
    try:
        yield b
    finally:
        b.stop()
