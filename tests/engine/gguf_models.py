"""Small real GGUF models for the embedding / reranking / LoRA tests, without torch.

`convert_minilm()` is Juggler's own converter (`juggler.registry.packaged_embeddings`,
which builds the catalog's `all-MiniLM-L6-v2-GGUF`) writing into a test's directory;
with `rerank_head_seed` it adds a seeded random classification head (`cls`,
`cls.output`) and rank pooling: a cross-encoder-shaped model, because no packaged
cross-encoder exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

from juggler.registry.packaged_embeddings import convert_bert, minilm_dir

__all__ = ["convert_minilm", "make_lora", "minilm_dir"]


def convert_minilm(src: Path, dest: Path, *, rerank_head_seed: int | None = None) -> Path:
    """Write a BERT GGUF for the model in `src` to `dest` and return `dest`."""
    if rerank_head_seed is None:
        return convert_bert(src, dest, name="all-MiniLM-L6-v2")
    n_embd = int(json.loads((src / "config.json").read_text())["hidden_size"])
    rng = np.random.default_rng(rerank_head_seed)
    scale = 1.0 / np.sqrt(n_embd)
    head = {
        "cls.weight": rng.standard_normal((n_embd, n_embd)) * scale,
        "cls.bias": np.zeros(n_embd),
        "cls.output.weight": rng.standard_normal((1, n_embd)) * scale,
        "cls.output.bias": np.zeros(1),
    }
    return convert_bert(src, dest, name="all-MiniLM-L6-v2 random rerank head", head=head)


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
