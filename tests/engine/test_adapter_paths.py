"""Issue 27: "A backend re-checks any path it is handed against the allowed folders"; the
probe found a backend that "accepts the router-only field `juggler_adapter` with any path
(`/etc/passwd` is opened and parsed; a LoRA from an arbitrary folder loads)"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juggler.engine.adapter_paths import check_adapter_path
from juggler.errors import Forbidden


@pytest.fixture()
def book(tmp_path: Path) -> Path:
    lora = tmp_path / "loras" / "a.gguf"
    lora.parent.mkdir()
    lora.write_bytes(b"GGUF")
    path = tmp_path / "adapters.json"
    entry = {"adapter_id": "a", "path": str(lora), "base_model": "M"}
    path.write_text(json.dumps({"a": entry}))
    return path


def test_only_a_registered_adapters_file_is_opened(book: Path, tmp_path: Path) -> None:
    lora = tmp_path / "loras" / "a.gguf"
    check_adapter_path(str(lora), book=str(book))
    check_adapter_path(str(tmp_path / "loras" / ".." / "loras" / "a.gguf"), book=str(book))
    for bad in ("/etc/passwd", str(tmp_path / "loras" / "b.gguf"), "loras/a.gguf", "", "/x\0"):
        with pytest.raises(Forbidden) as got:
            check_adapter_path(bad, book=str(book))
        assert got.value.param == "juggler_adapter"


def test_a_symlink_to_another_file_is_not_a_registered_path(book: Path, tmp_path: Path) -> None:
    link = tmp_path / "loras" / "link.gguf"
    link.symlink_to("/etc/passwd")
    with pytest.raises(Forbidden):
        check_adapter_path(str(link), book=str(book))


def test_a_backend_not_started_by_a_router_serves_no_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JUGGLER_ADAPTER_BOOK", raising=False)
    with pytest.raises(Forbidden, match="not started by a router"):
        check_adapter_path(str(tmp_path / "loras" / "a.gguf"))
