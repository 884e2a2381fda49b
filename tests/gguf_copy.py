"""Copies of a real GGUF written with the `gguf` package: split into parts (issue 49's
"split files (`-00001-of-00003.gguf`)"), or with metadata changed (a chat template)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import gguf


def copy_gguf(
    src: Path,
    dest: Path,
    *,
    split_max_tensors: int = 0,
    strings: Mapping[str, str] | None = None,
    tokens: Mapping[int, str] | None = None,
) -> list[Path]:
    """Copy `src` to `dest` (split into parts of at most `split_max_tensors` tensors,
    named `<dest stem>-0000i-of-0000n.gguf` beside `dest`, as llama.cpp names them), with
    the string keys in `strings` set and the vocabulary's tokens at the ids in `tokens`
    renamed (their type kept); returns the files written."""
    reader = gguf.GGUFReader(str(src))
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(str(dest), arch, split_max_tensors=split_max_tensors)
    changed = dict(strings or {})
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name in changed:
            writer.add_string(field.name, changed.pop(field.name))
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if tokens and field.name == gguf.Keys.Tokenizer.LIST:
            value = [tokens.get(i, t) for i, t in enumerate(value)]
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for key, value in changed.items():
        writer.add_string(key, value)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    if not split_max_tensors:
        return [dest]
    return sorted(dest.parent.glob(f"{dest.stem}-*-of-*.gguf"))
