"""What a llama.cpp backend allocates, from the GGUF header and the engine flags. Pure.

Issue 52: "the estimate counts what llama.cpp allocates (weights, KV, compute buffers per
context, output buffers)". Every engine worker is one `llama_context`, made as
`juggler/engine/engine_config.py` says (mirrored in `context_shape`: the engine is
imported by nobody but its own process), and llama.cpp gives each context:

- a KV cache of `n_ctx` cells (padded to 256; unified over the sequences), each cell
  keys and values in every layer, of the load's `cache_type_k` / `cache_type_v` (f16 by
  default; a q8_0 cell takes about half, issue 49: `kv_bytes_per_token`). None for an encoder
  (BERT: `<arch>.attention.causal` false);
- an output buffer of one row per output: `n_vocab` logits, plus `n_embd` values for an
  embedding context, in f32. It starts with `n_seq_max` rows and grows to `n_batch`
  rows when a decode asks for more outputs (drafts being checked, a pooled batch);
- a compute buffer, reserved for the worst decode of `n_ubatch` tokens: the larger of
  the logits of every row (`n_ubatch x (n_vocab + n_embd)` f32) and one layer's
  activations (the feed-forward and attention tensors, the f16 attention mask of
  `n_ctx x n_ubatch`, and without flash attention the `n_head x n_ctx x n_ubatch` f32
  scores). An encoder has no logits in its graph.

Plus the weights (the file: mapped or read, every page is read) with the vocabulary's
tables, a few MiB of each context's own structures, and the backend process
itself (Python, its HTTP server and the llama.cpp library: `PROCESS_BYTES`, measured).
A fresh backend has touched its KV caches and its output buffers' first rows
(`at_load`); decoding touches the compute buffers and may grow the output buffers
(`peak`, what the fit check counts).

Measured on SmolLM2-135M (llama.cpp's log and VmRSS, see tests/manager/test_fit_live.py):
ctx 8192 x 256 sequences gives KV 180 MiB, output 48 MiB, compute 98.25 MiB a context.
"""

from __future__ import annotations

from dataclasses import dataclass

from juggler.kv_cache import DEFAULT_KV_TYPE, row_bytes
from juggler.registry.gguf_meta import GgufInfo
from juggler.types import ModelType

MIB = 1 << 20
#: The element types of keys and values (llama.cpp's default: f16 both).
KvTypes = tuple[str, str]
F16: KvTypes = (DEFAULT_KV_TYPE, DEFAULT_KV_TYPE)
#: llama.cpp pads a context's cells to a multiple of this.
KV_PAD = 256
#: A backend process before any model buffer: the interpreter, FastAPI, uvicorn, numpy
#: and the llama.cpp library (VmRSS of a backend less its weights and buffers, about
#: 80 MiB measured on x86-64 Linux).
PROCESS_BYTES = 84 * MIB
#: What llama.cpp keeps of a vocabulary in memory, a token (its text, score, type and
#: lookup tables; about 350 bytes measured for SmolLM2's BPE, 190 for MiniLM's WPM).
VOCAB_BYTES = 350
#: A context's own structures beside its buffers (the graph, the scheduler, the
#: threads' work buffer; about 3 MiB measured).
CONTEXT_BYTES = 3 * MIB
#: Sequences an embedding context holds at least (`embed_worker_config`).
EMBED_MIN_SEQS = 32


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _most(value: object) -> int | None:
    """An int, or the largest of a per-layer list of ints."""
    if isinstance(value, list):
        return max((v for v in value if isinstance(v, int)), default=None)
    return _int(value)


def head_sizes(info: GgufInfo) -> tuple[int, int] | None:
    """The values of a key head and of a value head; None when the header does not say."""
    m, arch = info.metadata, info.architecture
    heads = _most(m.get(f"{arch}.attention.head_count"))
    embd = _int(m.get(f"{arch}.embedding_length"))
    if heads is None or embd is None:
        return None
    k_len = _int(m.get(f"{arch}.attention.key_length")) or embd // heads
    return k_len, _int(m.get(f"{arch}.attention.value_length")) or k_len


def kv_bytes_per_token(info: GgufInfo, kv_types: KvTypes = F16) -> int | None:
    """Bytes of keys and values one token takes across every layer, at the element types
    `kv_types` (keys, values); None when the header does not say (a recurrent model, or
    an architecture without these keys)."""
    m, arch = info.metadata, info.architecture
    layers = _int(m.get(f"{arch}.block_count"))
    heads = _most(m.get(f"{arch}.attention.head_count"))
    sizes = head_sizes(info)
    if layers is None or heads is None or sizes is None:
        return None
    k_len, v_len = sizes
    kv_heads = m.get(f"{arch}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per layer (some hybrid architectures)
        per_layer = [int(h) for h in kv_heads if isinstance(h, int)]
    elif isinstance(kv_heads, int):
        per_layer = [kv_heads] * layers
    else:
        return None
    type_k, type_v = kv_types
    total = sum(row_bytes(type_k, h * k_len) + row_bytes(type_v, h * v_len) for h in per_layer)
    return total or None


def is_encoder(info: GgufInfo) -> bool:
    """A model without a KV cache (non-causal attention, BERT's kind)."""
    return info.metadata.get(f"{info.architecture}.attention.causal") is False


@dataclass(frozen=True)
class ContextShape:
    """The sizes of one engine worker's `llama_context`."""

    n_ctx: int
    n_batch: int
    n_seq_max: int
    embeddings: bool
    flash_attn: bool
    kv_types: KvTypes = F16


def context_shape(
    info: GgufInfo,
    model_type: ModelType,
    *,
    ctx_size: int,
    parallel: int,
    batch_size: int,
    flash_attn: str,
    kv_types: KvTypes = F16,
) -> ContextShape:
    """As `worker_config` and `embed_worker_config` make them (n_ubatch = n_batch; flash
    attention automatic counts as on, as on the CPU, and is on for a quantized V)."""
    fa = flash_attn != "off"
    if model_type is ModelType.LLM:
        batch = max(batch_size, parallel)
        return ContextShape(ctx_size, batch, parallel, False, fa, kv_types)
    n_ctx = min(ctx_size, info.context_length or ctx_size)
    return ContextShape(n_ctx, n_ctx, max(parallel, EMBED_MIN_SEQS), True, fa, kv_types)


@dataclass(frozen=True)
class Footprint:
    """Bytes of one backend: its weights and process, and each worker's buffers."""

    weights: int
    process: int
    workers: int
    #: The KV cache and the context's own structures.
    kv: int
    output: int
    output_max: int
    compute: int

    @property
    def per_worker(self) -> int:
        """One context at its peak: KV, the grown output buffer, the compute buffer."""
        return self.kv + self.output_max + self.compute

    @property
    def at_load(self) -> int:
        """What a fresh backend holds: nothing has been decoded yet."""
        return self.process + self.weights + self.workers * (self.kv + self.output)

    @property
    def peak(self) -> int:
        """Everything llama.cpp allocates, touched (what the fit check counts)."""
        return self.process + self.weights + self.workers * self.per_worker


def footprint(info: GgufInfo, shape: ContextShape, workers: int) -> Footprint:
    """The estimate for `workers` contexts of `shape` (see the module doc)."""
    m, arch = info.metadata, info.architecture
    embd = _int(m.get(f"{arch}.embedding_length")) or 0
    heads = _most(m.get(f"{arch}.attention.head_count")) or 0
    ff = _most(m.get(f"{arch}.feed_forward_length")) or 4 * embd
    vocab = info.vocab_size or 0
    encoder = is_encoder(info)
    kv = 0 if encoder else _pad(shape.n_ctx) * (kv_bytes_per_token(info, shape.kv_types) or 0)
    row = 4 * (vocab + (embd if shape.embeddings else 0))
    output = shape.n_seq_max * row
    output_max = max(shape.n_seq_max, shape.n_batch) * row
    ubatch = shape.n_batch
    n_kv = shape.n_ctx if not encoder else ubatch
    layer = ubatch * (3 * ff + 3 * embd) * 4 + n_kv * ubatch * 2
    if not shape.flash_attn:
        layer += heads * n_kv * ubatch * 4
    logits = 0 if encoder else ubatch * (vocab + 4 * embd) * 4
    return Footprint(
        weights=info.size_bytes + vocab * VOCAB_BYTES,
        process=PROCESS_BYTES,
        workers=workers,
        kv=kv + CONTEXT_BYTES,
        output=output,
        output_max=output_max,
        compute=max(logits, layer),
    )


def _pad(n: int) -> int:
    return -(-n // KV_PAD) * KV_PAD
