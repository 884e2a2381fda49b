"""The one boundary with llama.cpp: model, vocabulary, context and batch wrappers.

Everything that touches llama-cpp-python's low-level ctypes bindings lives here, and
llama.cpp failures become Juggler errors here (`raise ... from exc`).

Thread rules:
- `Model` is loaded once by the main thread and then only read. Tokenizing and turning
  tokens into text read the vocabulary, so any thread may call them.
- A `Context` (and its `Batch`) belongs to the one worker thread that created it; only
  that thread decodes or edits its memory. `llama_decode` releases the GIL, so workers
  decode in parallel.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp.llama_cpp as C
import numpy as np

from juggler.errors import CheckpointMissing, LoadFailed

log = logging.getLogger(__name__)

_backend_lock = threading.Lock()
_backend_ready = False

POOLING_UNSPECIFIED = C.LLAMA_POOLING_TYPE_UNSPECIFIED
POOLING_NONE = C.LLAMA_POOLING_TYPE_NONE
POOLING_MEAN = C.LLAMA_POOLING_TYPE_MEAN
POOLING_CLS = C.LLAMA_POOLING_TYPE_CLS
POOLING_LAST = C.LLAMA_POOLING_TYPE_LAST
POOLING_RANK = C.LLAMA_POOLING_TYPE_RANK
#: numpy's view of `llama_token_data` {int32 id; float logit; float p}.
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def init_backend(*, verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log through ours."""
    global _backend_ready
    with _backend_lock:
        if _backend_ready:
            return
        # llama-cpp-python prints every llama.cpp log line unless its logger says otherwise.
        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
        import llama_cpp._logger  # noqa: F401  (installs the log callback)

        C.llama_backend_init()
        _backend_ready = True


def supports_gpu_offload() -> bool:
    return bool(C.llama_supports_gpu_offload())


class Model:
    """A loaded `llama_model` and its vocabulary; read-only after construction."""

    def __init__(self, path: str, *, n_gpu_layers: int = 0) -> None:
        init_backend()
        if not os.path.isfile(path):
            raise CheckpointMissing(f"model file not found: {path}")
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        model = C.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise LoadFailed(f"llama.cpp could not load the model file {path}")
        self.ptr: Any = model
        self.path = path
        self.n_gpu_layers = n_gpu_layers
        self.vocab: Any = C.llama_model_get_vocab(model)
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(C.llama_model_n_ctx_train(model))
        self.n_embd = int(C.llama_model_n_embd(model))
        self.n_cls_out = int(C.llama_model_n_cls_out(model))
        self.has_encoder = bool(C.llama_model_has_encoder(model))
        self.has_decoder = bool(C.llama_model_has_decoder(model))
        self.add_bos = bool(C.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(C.llama_vocab_get_add_eos(self.vocab))
        self.add_sep = bool(C.llama_vocab_get_add_sep(self.vocab))
        self.bos = int(C.llama_vocab_bos(self.vocab))
        self.eos = int(C.llama_vocab_eos(self.vocab))
        self.sep = int(C.llama_vocab_sep(self.vocab))
        self.architecture = self.meta("general.architecture") or "unknown"
        self._pieces: dict[int, bytes] = {}
        self._eog: tuple[int, ...] | None = None

    # -- metadata --------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string, or None when the key is absent."""
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = C.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    def chat_template(self, name: str | None = None) -> str | None:
        """The GGUF's default chat template, or a named one (e.g. "rerank")."""
        raw = C.llama_model_chat_template(self.ptr, name.encode() if name else None)
        return raw.decode("utf-8", errors="replace") if raw else None

    # -- vocabulary (any thread) ------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        arr = (C.llama_token * cap)()
        n = C.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (C.llama_token * cap)()
            n = C.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n})")
        return list(arr[:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one token as generated text (control tokens render empty)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = C.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = C.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def special_text(self, token: int) -> str:
        """The text of a (special) token as a template would write it, e.g. "<s>"."""
        if token < 0:
            return ""
        buf = ctypes.create_string_buffer(128)
        n = C.llama_token_to_piece(self.vocab, token, buf, 128, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(C.llama_vocab_is_eog(self.vocab, token))

    def eog_tokens(self) -> tuple[int, ...]:
        """Every end-of-generation token of the vocabulary (computed once)."""
        if self._eog is None:
            self._eog = tuple(t for t in range(self.n_vocab) if self.is_eog(t))
        return self._eog

    def close(self) -> None:
        if self.ptr:
            C.llama_model_free(self.ptr)
            self.ptr = None


@dataclass(frozen=True)
class ContextParams:
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_threads: int
    embeddings: bool = False
    pooling: int = POOLING_UNSPECIFIED
    kv_unified: bool = True
    #: llama.cpp's flash-attention switch: -1 auto (on where supported), 0 off, 1 on.
    flash_attn: int = -1


class Batch:
    """A `llama_batch` of at most `capacity` tokens, each in exactly one sequence."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw: Any = C.llama_batch_init(capacity, 0, 1)
        self.n_tokens = 0

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its row index (the index logits are read by)."""
        i = self.n_tokens
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq_id
        raw.logits[i] = logits
        self.n_tokens = i + 1
        return i

    def close(self) -> None:
        if self.raw is not None:
            self.raw.n_tokens = 0
            C.llama_batch_free(self.raw)
            self.raw = None


class Context:
    """One `llama_context`; owned and used by exactly one worker thread."""

    def __init__(self, model: Model, params: ContextParams) -> None:
        cp = C.llama_context_default_params()
        cp.n_ctx = params.n_ctx
        cp.n_batch = params.n_batch
        cp.n_ubatch = params.n_ubatch
        cp.n_seq_max = params.n_seq_max
        cp.n_threads = params.n_threads
        cp.n_threads_batch = params.n_threads
        cp.embeddings = params.embeddings
        cp.pooling_type = params.pooling
        cp.kv_unified = params.kv_unified
        cp.flash_attn_type = params.flash_attn
        cp.no_perf = True
        ctx = C.llama_init_from_model(model.ptr, cp)
        if not ctx:
            raise LoadFailed("llama.cpp could not create a context (out of memory or bad params)")
        self.ptr: Any = ctx
        self.model = model
        self.n_ctx = int(C.llama_n_ctx(ctx))
        self.n_batch = int(C.llama_n_batch(ctx))
        self.n_seq_max = int(C.llama_n_seq_max(ctx))
        self.pooling = int(C.llama_pooling_type(ctx))
        self.memory: Any = C.llama_get_memory(ctx)
        #: How many removals have run (the worker compacts after some, when idle).
        self.num_removals = 0

    def decode(self, batch: Batch) -> int:
        """Run the model on the batch; 0 on success (llama_decode's return code)."""
        batch.raw.n_tokens = batch.n_tokens
        return int(C.llama_decode(self.ptr, batch.raw))

    def encode(self, batch: Batch) -> int:
        batch.raw.n_tokens = batch.n_tokens
        return int(C.llama_encode(self.ptr, batch.raw))

    # -- memory (KV cache), sequence-scoped only ----------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of one sequence; False if a partial removal failed."""
        if not self.memory:
            return True
        self.num_removals += 1
        return bool(C.llama_memory_seq_rm(self.memory, seq_id, p0, p1))

    def seq_state(self, seq_id: int) -> Any | None:
        """A copy of one sequence's KV cells (llama.cpp's per-sequence state), or None."""
        size = int(C.llama_state_seq_get_size(self.ptr, seq_id))
        if size <= 0:
            return None
        buf = (ctypes.c_ubyte * size)()
        if int(C.llama_state_seq_get_data(self.ptr, buf, size, seq_id)) != size:
            return None
        return buf

    def restore_seq_state(self, seq_id: int, state: Any) -> bool:
        """Put a `seq_state()` copy back into the (now empty) sequence. llama.cpp places it
        in the first free run of cells, so this moves the sequence down into holes."""
        size = len(state)
        return int(C.llama_state_seq_set_data(self.ptr, state, size, seq_id)) == size

    def seq_pos_max(self, seq_id: int) -> int:
        if not self.memory:
            return -1
        return int(C.llama_memory_seq_pos_max(self.memory, seq_id))

    def logits_row(self, row: int) -> Any:
        """A copy of the logits of batch row `row` of the last decode (numpy float32)."""
        ptr = C.llama_get_logits_ith(self.ptr, row)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits for the row")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,)).copy()

    def embeddings_seq(self, seq_id: int, n: int) -> list[float]:
        ptr = C.llama_get_embeddings_seq(self.ptr, seq_id)
        if not ptr:
            raise RuntimeError("llama.cpp returned no pooled embedding for the sequence")
        return [float(x) for x in ptr[:n]]

    def embeddings_ith(self, i: int, n: int) -> list[float]:
        ptr = C.llama_get_embeddings_ith(self.ptr, i)
        if not ptr:
            raise RuntimeError("llama.cpp returned no embedding for the row")
        return [float(x) for x in ptr[:n]]

    def close(self) -> None:
        if self.ptr:
            C.llama_free(self.ptr)
            self.ptr = None


class Sampler:
    """A `llama_sampler` chain owned by one generation on one worker thread."""

    def __init__(
        self,
        model: Model,
        *,
        temperature: float,
        top_k: int,
        top_p: float,
        min_p: float,
        seed: int,
        repeat_penalty: float,
        frequency_penalty: float,
        presence_penalty: float,
        penalty_last_n: int,
        banned: Sequence[int] = (),
    ) -> None:
        chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
        self.ptr: Any = chain
        if banned:
            biases = (C.llama_logit_bias * len(banned))()
            for i, tok in enumerate(banned):
                biases[i].token = tok  # type: ignore[assignment]
                biases[i].bias = float("-inf")
            C.llama_sampler_chain_add(
                chain, C.llama_sampler_init_logit_bias(model.n_vocab, len(banned), biases)
            )
        if repeat_penalty != 1.0 or frequency_penalty != 0.0 or presence_penalty != 0.0:
            C.llama_sampler_chain_add(
                chain,
                C.llama_sampler_init_penalties(
                    model.n_vocab,
                    penalty_last_n,
                    repeat_penalty,
                    frequency_penalty,
                    presence_penalty,
                ),
            )
        if temperature <= 0.0:
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
            return
        if top_k > 0:
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_k(top_k))
        if 0.0 < top_p < 1.0:
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_p(top_p, 1))
        if min_p > 0.0:
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_min_p(min_p, 1))
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_temp(temperature))
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    def sample(self, ctx: Context, row: int) -> int:
        """Sample (and accept) a token from the logits of batch row `row`."""
        return int(C.llama_sampler_sample(self.ptr, ctx.ptr, row))

    def sample_logits(self, logits: Any) -> int:
        """Sample (and accept) a token from saved logits, as `sample` does from a row."""
        n = int(logits.shape[0])
        data = (C.llama_token_data * n)()
        view = np.frombuffer(memoryview(data).cast("B"), dtype=_TOKEN_DATA)
        view["id"] = np.arange(n, dtype=np.int32)
        view["logit"] = logits
        view["p"] = 0.0
        arr = C.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        C.llama_sampler_apply(self.ptr, ctypes.byref(arr))
        if not 0 <= arr.selected < arr.size:
            raise RuntimeError("the sampler chain selected no token")
        token = int(arr.data[arr.selected].id)
        C.llama_sampler_accept(self.ptr, token)
        return token

    def close(self) -> None:
        if self.ptr:
            C.llama_sampler_free(self.ptr)
            self.ptr = None
