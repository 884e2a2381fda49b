"""A small random-weight vision projector GGUF that llama.cpp's `clip` loader accepts.

No vision model is on the package registry, so the tests build one: a LLaVA-1.5-style
`mlp` projector (a CLIP-like tower of `N_LAYER` blocks, `N_EMBD` wide, then
`N_EMBD -> n_out -> n_out`) whose output width `n_out` is the text model's embedding
width (576 for SmolLM2-135M). A 64x64 image in 16x16 patches is 16 image tokens.
Random weights prove the plumbing, not the quality (issue 51).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

IMAGE_SIZE = 64
PATCH_SIZE = 16
N_EMBD = 64
N_FF = 128
N_LAYER = 2
N_HEAD = 4
#: What one image becomes: one token per patch.
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2


def make_projector(
    dest: Path,
    *,
    n_out: int = 576,
    seed: int = 51,
    image_size: int = IMAGE_SIZE,
    patch_size: int = PATCH_SIZE,
    n_embd: int = N_EMBD,
    n_ff: int = N_FF,
    n_layer: int = N_LAYER,
    n_head: int = N_HEAD,
    f16: bool = False,
) -> Path:
    """Write the projector GGUF to `dest` and return `dest` (the defaults: the tests'
    tiny one; `bench/bench_vision.py` makes CLIP-sized ones, in f16 with `f16`)."""
    rng = np.random.default_rng(seed)
    n_tokens = (image_size // patch_size) ** 2

    def rand(*shape: int, scale: float = 0.02) -> np.ndarray:
        out = rng.standard_normal(shape, dtype=np.float32) * scale
        return out.astype(np.float16) if f16 and len(shape) >= 2 else out

    w = gguf.GGUFWriter(str(dest), "clip")
    w.add_string("general.name", "juggler test projector (random weights)")
    w.add_uint32("general.file_type", 0)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_text_encoder", False)
    w.add_string("clip.projector_type", "mlp")
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", n_out)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    # Every block feeds the projector (llava's default stops one block short).
    w.add_uint32("clip.vision.block_count", n_layer + 1)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    n_pos = n_tokens + 1  # the class embedding's position too
    # numpy shapes are the reverse of ggml's: a ggml [n_in, n_out] weight is (n_out, n_in).
    w.add_tensor("v.patch_embd.weight", rand(n_embd, 3, patch_size, patch_size))
    w.add_tensor("v.class_embd", rand(n_embd))
    w.add_tensor("v.position_embd.weight", rand(n_pos, n_embd))
    w.add_tensor("v.pre_ln.weight", np.ones(n_embd, np.float32))
    w.add_tensor("v.pre_ln.bias", np.zeros(n_embd, np.float32))
    for i in range(n_layer + 1):
        p = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"{p}.{name}.weight", rand(n_embd, n_embd))
            w.add_tensor(f"{p}.{name}.bias", np.zeros(n_embd, np.float32))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"{p}.{name}.weight", np.ones(n_embd, np.float32))
            w.add_tensor(f"{p}.{name}.bias", np.zeros(n_embd, np.float32))
        w.add_tensor(f"{p}.ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(f"{p}.ffn_up.bias", np.zeros(n_ff, np.float32))
        w.add_tensor(f"{p}.ffn_down.weight", rand(n_embd, n_ff))
        w.add_tensor(f"{p}.ffn_down.bias", np.zeros(n_embd, np.float32))
    w.add_tensor("mm.0.weight", rand(n_out, n_embd, scale=0.1))
    w.add_tensor("mm.0.bias", np.zeros(n_out, np.float32))
    w.add_tensor("mm.2.weight", rand(n_out, n_out, scale=0.05))
    w.add_tensor("mm.2.bias", np.zeros(n_out, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest
