"""pins.json: pins and saved load options, one store for per-model settings."""

from __future__ import annotations

import json
from pathlib import Path

from juggler.router.core.pins import PinBook


def test_saved_options_and_pins_live_side_by_side(tmp_path: Path) -> None:
    book = PinBook(tmp_path / "pins.json")
    book.save_options("A", {"ctx_size": 2048, "llamacpp_args": None})
    assert book.saved_options("A") == {"ctx_size": 2048}
    data = json.loads((tmp_path / "pins.json").read_text())
    assert data == {"A": {"saved_options": {"ctx_size": 2048}}}
    book.forget(["A"])  # an unload keeps saved options
    assert book.saved_options("A") == {"ctx_size": 2048} and book.pinned() == {}
    book.save_options("A", {})  # Lemonade: the stored value is replaced (here: by none)
    assert book.read() == {}
    book.save_options("B", {"ctx_size": 512})
    book.drop("B")
    assert book.read() == {}


def test_a_file_from_before_saved_options_reads_as_pins(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    path.write_text(json.dumps({"M": {"ctx_size": 1536, "llamacpp_backend": "cpu"}}))
    book = PinBook(path)
    assert book.pinned() == {"M": {"ctx_size": 1536, "llamacpp_backend": "cpu"}}
    assert book.saved_options("M") == {}
