"""The element types of llama.cpp's KV cache (issue 49: "`cache_type_k` / `cache_type_v`
(f16 default; q8_0, q4_0 and the others llama.cpp accepts) as model options and
settings, as llama-server's `-ctk/-ctv` and Ollama's `OLLAMA_KV_CACHE_TYPE` offer").

The names are llama-server's (`--cache-type-k` takes f32, f16, bf16, q8_0, q4_0, q4_1,
iq4_nl, q5_0, q5_1). A quantized type stores a head's values in blocks of 32 with a
scale, so a cell takes less memory: for SmolLM2 23040 bytes at f16, 12240 at q8_0, 6480
at q4_0. llama.cpp needs flash attention for a quantized V cache (it enables it when
flash attention is automatic, and refuses a context with it off) and a head size that
is a multiple of the block.

Pure: used by the options (names), the manager's fit and automatic sizing (bytes) and
the engine (llama.cpp's `ggml_type` numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

KvCacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
DEFAULT_KV_TYPE: KvCacheType = "f16"
KV_TYPE_NAMES: tuple[str, ...] = get_args(KvCacheType)


@dataclass(frozen=True)
class KvType:
    """One element type: llama.cpp's `ggml_type` number, and `block_bytes` bytes for
    every `block` values."""

    ggml_type: int
    block: int
    block_bytes: int

    @property
    def is_quantized(self) -> bool:
        return self.block > 1


#: ggml.h's `ggml_type` numbers and block sizes.
KV_TYPES: dict[str, KvType] = {
    "f32": KvType(0, 1, 4),
    "f16": KvType(1, 1, 2),
    "bf16": KvType(30, 1, 2),
    "q8_0": KvType(8, 32, 34),
    "q4_0": KvType(2, 32, 18),
    "q4_1": KvType(3, 32, 20),
    "iq4_nl": KvType(20, 32, 18),
    "q5_0": KvType(6, 32, 22),
    "q5_1": KvType(7, 32, 24),
}


def row_bytes(name: str, values: int) -> int:
    """Bytes of `values` elements of type `name` (a partial block takes a whole one)."""
    t = KV_TYPES[name]
    return -(-values // t.block) * t.block_bytes


def is_quantized(name: str) -> bool:
    return KV_TYPES[name].is_quantized


def fits_head(name: str, head_size: int) -> bool:
    """Whether a head of `head_size` values splits into whole blocks of `name` (llama.cpp
    refuses a context otherwise)."""
    return head_size % KV_TYPES[name].block == 0
