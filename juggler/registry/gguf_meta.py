"""What a GGUF file says about itself: architecture, context length, size, quantization.

Reads the header only (key/value pairs and tensor descriptions, never the weights), so
it is cheap even for large files. Used for model entries (`max_context_window`) and
Ollama's `/api/show` and `/api/tags` details. Pure apart from reading the file; results
are cached by (path, size, mtime).

The format (ggml's gguf.md): magic `GGUF`, u32 version, u64 tensor count, u64 key/value
count, then the key/values (u64-length-prefixed key, u32 type, value), then per tensor
its name, u32 dims, u64 per dim, u32 ggml type and u64 offset. Little-endian.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from juggler.reasoning import template_reasons

_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
#: Arrays longer than this (vocabularies, merges) are skipped, not kept.
_MAX_KEPT_ARRAY = 64
#: A header larger than this is not a model header (a guard against hostile files).
_MAX_STRING = 1 << 24
_MAX_COUNT = 1 << 32

#: llama.cpp's `general.file_type` numbers -> quantization names (LLAMA_FTYPE_*).
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4",
}


class GgufError(ValueError):
    """The file is not a GGUF file, or its header is damaged."""


@dataclass(frozen=True)
class GgufInfo:
    """The header facts Juggler shows about a model file."""

    architecture: str
    name: str | None
    context_length: int | None
    file_type: str | None
    parameter_count: int
    size_bytes: int
    #: Scalar (and short array) key/values, e.g. "llama.block_count": 30.
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Tokens in the vocabulary (the rows of `token_embd.weight`), if the file says.
    vocab_size: int | None = None
    #: Bytes of each repeating layer's tensors (`blk.N.*`), by layer number.
    layer_bytes: tuple[int, ...] = ()
    #: Bytes of the output layer (`output.weight`, or the token embeddings it shares,
    #: and `output_norm`): what llama.cpp puts on the GPU as the last offloaded layer.
    output_bytes: int = 0
    #: The output layer is the token embeddings (no `output.weight`): llama.cpp keeps the
    #: embeddings in host memory and puts a copy of them on the GPU.
    output_tied: bool = False

    @property
    def parameter_size(self) -> str:
        """Ollama's form: "135M", "8.0B"."""
        n = self.parameter_count
        if n >= 1_000_000_000:
            return f"{n / 1e9:.1f}B"
        if n >= 1_000_000:
            return f"{round(n / 1e6)}M"
        return f"{round(n / 1e3)}K" if n >= 1000 else str(n)


class _Reader:
    def __init__(self, f: BinaryIO) -> None:
        self.f = f

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise GgufError("the GGUF header is cut short")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        n = self.take("<Q")
        if n > _MAX_STRING:
            raise GgufError(f"a GGUF string of {n} bytes is not plausible")
        data = self.f.read(n)
        if len(data) != n:
            raise GgufError("the GGUF header is cut short")
        return data.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, count = self.take("<I"), self.take("<Q")
            if count > _MAX_COUNT:
                raise GgufError(f"a GGUF array of {count} items is not plausible")
            if count > _MAX_KEPT_ARRAY:
                self.skip_array(itype, count)
                return None
            return [self.value(itype) for _ in range(count)]
        raise GgufError(f"unknown GGUF value type {vtype}")

    def skip_array(self, itype: int, count: int) -> None:
        if itype in _SCALARS:
            self.f.seek(struct.calcsize(_SCALARS[itype]) * count, 1)
        elif itype == _STRING:
            for _ in range(count):
                self.f.seek(self.take("<Q"), 1)
        else:
            for _ in range(count):
                self.value(itype)


def read_info(path: Path) -> GgufInfo:
    """The header facts of a GGUF file. Raises GgufError (or OSError if unreadable)."""
    stat = path.stat()
    return _read_cached(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _read_cached(path: str, size: int, mtime_ns: int) -> GgufInfo:
    with open(path, "rb") as f:
        r = _Reader(f)
        if f.read(4) != b"GGUF":
            raise GgufError(f"{path} is not a GGUF file")
        version = r.take("<I")
        if version < 2:
            raise GgufError(f"GGUF version {version} is not supported")
        num_tensors, num_kv = r.take("<Q"), r.take("<Q")
        if num_tensors > _MAX_COUNT or num_kv > _MAX_COUNT:
            raise GgufError("the GGUF header counts are not plausible")
        meta: dict[str, Any] = {}
        for _ in range(num_kv):
            key = r.string()
            value = r.value(r.take("<I"))
            if value is not None:
                meta[key] = value
        params = 0
        vocab: int | None = None
        offsets: list[tuple[int, str]] = []
        for _ in range(num_tensors):
            tensor = r.string()
            dims = [r.take("<Q") for _ in range(r.take("<I"))]
            if tensor == "token_embd.weight" and len(dims) >= 2:
                vocab = dims[1]
            r.take("<I")
            offsets.append((r.take("<Q"), tensor))
            count = 1
            for d in dims:
                count *= d
            params += count
        align = meta.get("general.alignment", 32)
        align = align if isinstance(align, int) and align > 0 else 32
        data_start = -(-f.tell() // align) * align
    layers, output = _layer_sizes(offsets, size - data_start)
    tied = not any(name == "output.weight" for _, name in offsets)
    arch = str(meta.get("general.architecture", "unknown"))
    ctx = meta.get(f"{arch}.context_length")
    ftype = meta.get("general.file_type")
    return GgufInfo(
        architecture=arch,
        name=meta.get("general.name"),
        context_length=int(ctx) if isinstance(ctx, int) else None,
        file_type=FILE_TYPES.get(ftype) if isinstance(ftype, int) else None,
        parameter_count=params,
        size_bytes=size,
        metadata=meta,
        vocab_size=vocab,
        layer_bytes=layers,
        output_bytes=output,
        output_tied=tied,
    )


def _layer_sizes(offsets: list[tuple[int, str]], data_bytes: int) -> tuple[tuple[int, ...], int]:
    """Bytes per repeating layer and of the output layer, from the tensors' data offsets
    (each tensor runs to the next one's offset, the last to the end of the file)."""
    ordered = sorted(offsets)
    sizes: dict[str, int] = {}
    for i, (offset, name) in enumerate(ordered):
        end = ordered[i + 1][0] if i + 1 < len(ordered) else data_bytes
        sizes[name] = max(0, end - offset)
    per_layer: dict[int, int] = {}
    for name, n in sizes.items():
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            per_layer[int(parts[1])] = per_layer.get(int(parts[1]), 0) + n
    layers = tuple(per_layer.get(i, 0) for i in range(max(per_layer, default=-1) + 1))
    head = sizes.get("output.weight", sizes.get("token_embd.weight", 0))
    return layers, head + sizes.get("output_norm.weight", 0)


#: Architectures that only embed (llama.cpp's encoder-only models).
_ENCODERS = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "neo-bert", "t5encoder"}
)


def labels_of(info: GgufInfo) -> tuple[str, ...]:
    """Catalog labels a GGUF implies: rank pooling -> reranking, an encoder or another
    pooling -> embeddings, else none (a chat/completion model), `reasoning` too when its
    chat template thinks (issue 49). Pure."""
    pooling = info.metadata.get(f"{info.architecture}.pooling_type")
    if pooling == 4:
        return ("reranking",)
    if info.architecture in _ENCODERS or pooling in (1, 2, 3):
        return ("embeddings",)
    template = info.metadata.get("tokenizer.chat_template")
    return ("reasoning",) if template_reasons(template) else ()
