"""The LoRA adapter book and its GGUF checks, on tiny GGUF files written here."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from juggler.errors import BadRequest, NotFound
from juggler.registry.adapters import AdapterBook, AdapterInfo, check_adapter, check_id


def write(path: Path, arch: str, tensors: dict[str, tuple[int, ...]], **kv: str) -> Path:
    """A GGUF with zero tensors of these numpy shapes (ggml order is the reverse)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        w.add_string(key.replace("__", "."), value)
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


LORA = {"general__type": "adapter", "adapter__type": "lora"}


@pytest.fixture
def base(tmp_path: Path) -> Path:
    # ggml [n_in=16, n_out=8] is numpy (8, 16).
    return write(tmp_path / "base.gguf", "llama", {"blk.0.attn_output.weight": (8, 16)})


def test_an_adapter_shaped_for_the_base_passes(tmp_path: Path, base: Path) -> None:
    lora = write(
        tmp_path / "a.gguf",
        "llama",
        {"blk.0.attn_output.weight.lora_a": (4, 16), "blk.0.attn_output.weight.lora_b": (8, 4)},
        **LORA,
    )
    check_adapter(lora, base)


@pytest.mark.parametrize(
    ("arch", "tensors", "kv", "says"),
    [
        ("llama", {"x": (2, 2)}, {}, "not a LoRA adapter"),
        ("gemma3", {"blk.0.attn_output.weight.lora_a": (4, 16)}, LORA, "'gemma3' model"),
        ("llama", {"blk.0.attn_output.weight.lora_a": (4, 16)}, LORA, "has no pair"),
        ("llama", {"blk.9.ffn_down.weight.lora_a": (4, 16)}, LORA, "has no base tensor"),
        (
            "llama",
            {"blk.0.attn_output.weight.lora_a": (4, 32), "blk.0.attn_output.weight.lora_b": (8, 4)},
            LORA,
            "does not fit",
        ),
        ("llama", {"other": (2, 2)}, LORA, "no lora_a/lora_b"),
    ],
)
def test_a_file_that_does_not_fit_is_refused_naming_why(
    tmp_path: Path,
    base: Path,
    arch: str,
    tensors: dict[str, tuple[int, ...]],
    kv: dict[str, str],
    says: str,
) -> None:
    lora = write(tmp_path / "bad.gguf", arch, tensors, **kv)
    with pytest.raises(BadRequest, match=says):
        check_adapter(lora, base)


def test_not_a_gguf_file_is_refused(tmp_path: Path, base: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 10)
    with pytest.raises(BadRequest, match="not a readable GGUF"):
        check_adapter(junk, base)


def test_the_book_keeps_adapters_in_a_file(tmp_path: Path) -> None:
    book = AdapterBook(tmp_path)
    info = AdapterInfo("a", "/m/a.gguf", "Base")
    book.add(info)
    assert AdapterBook(tmp_path).get("a") == info  # another reader sees it
    assert book.list() == [info]
    assert book.remove("a") == info
    assert book.get("a") is None
    with pytest.raises(NotFound):
        book.remove("a")


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "-x", "x" * 129, "a b"])
def test_adapter_ids_are_plain_names(bad: str) -> None:
    with pytest.raises(BadRequest):
        check_id(bad)
