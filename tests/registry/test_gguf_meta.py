"""The GGUF header reader, on files written by the `gguf` package."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from juggler.registry.gguf_meta import GgufError, read_info


def write_gguf(path: Path) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny test model")
    w.add_context_length(2048)
    w.add_block_count(2)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_token_list([f"t{i}" for i in range(300)])  # a long array is skipped, not kept
    w.add_tensor("a.weight", np.zeros((4, 8), dtype=np.float32))
    w.add_tensor("b.weight", np.zeros((16,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_header_facts_of_a_written_file(tmp_path: Path) -> None:
    info = read_info(write_gguf(tmp_path / "m.gguf"))
    assert info.architecture == "llama" and info.name == "tiny test model"
    assert info.context_length == 2048 and info.file_type == "Q8_0"
    assert info.parameter_count == 4 * 8 + 16 and info.parameter_size == "48"
    assert info.metadata["llama.block_count"] == 2
    assert "tokenizer.ggml.tokens" not in info.metadata
    assert info.size_bytes == (tmp_path / "m.gguf").stat().st_size


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(GgufError):
        read_info(tmp_path / "x.gguf")
    (tmp_path / "cut.gguf").write_bytes(b"GGUF\x03\0\0\0" + b"\1" * 6)
    with pytest.raises(GgufError):
        read_info(tmp_path / "cut.gguf")
