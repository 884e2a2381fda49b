"""llama.cpp's per-worker objects over llama-cpp-python's ctypes bindings: a context and
its batch (`ports.LlamaContext`, `TokenBatch`; the sampler chains that read its logits
are `native_sampler`'s).

A context (and its batch and samplers) belongs to the one worker thread that created it;
only that thread decodes or edits its memory. `llama_decode` releases the GIL, so
workers decode in parallel. A failed llama.cpp call raises `EngineError`.
"""

from __future__ import annotations

import ctypes
from typing import Any, cast

import llama_cpp.llama_cpp as C
import numpy as np

from juggler.engine.llama.ports import ContextParams, Logits, SeqState, TokenBatch
from juggler.errors import EngineError, LoadFailed

POOLING_NONE = C.LLAMA_POOLING_TYPE_NONE
POOLING_RANK = C.LLAMA_POOLING_TYPE_RANK

#: `llama_get_logits_ith` returning the row's address as an int: its logits are read
#: through a numpy view made once per address (`Context.logits_view`), not a new array
#: a token (tens of microseconds of a lone stream's host time per token, issue 23).
_logits_at = type(C._lib.llama_get_logits_ith)(("llama_get_logits_ith", C._lib))
_logits_at.argtypes = [ctypes.c_void_p, ctypes.c_int32]
_logits_at.restype = ctypes.c_void_p
#: Row views a context keeps (a decode's rows sit at the same addresses every decode).
_MAX_VIEWS = 1024


class Batch:
    """A `llama_batch` of at most `capacity` tokens, each in exactly one sequence."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw: Any = C.llama_batch_init(capacity, 0, 1)
        self.n_tokens = 0
        # The arrays llama_batch_init allocated, each read off the struct once (a ctypes
        # field read makes a new pointer object: five a token, on a lone stream's path).
        raw = self.raw
        self._token, self._pos, self._n_seq_id = raw.token, raw.pos, raw.n_seq_id
        self._seq_id, self._logits = raw.seq_id, raw.logits

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its row index (the index logits are read by)."""
        i = self.n_tokens
        self._token[i] = token
        self._pos[i] = pos
        self._n_seq_id[i] = 1
        self._seq_id[i][0] = seq_id
        self._logits[i] = logits
        self.n_tokens = i + 1
        return i

    def close(self) -> None:
        if self.raw is not None:
            self.raw.n_tokens = 0
            C.llama_batch_free(self.raw)
            self.raw = None


class Context:
    """One `llama_context`; owned and used by exactly one worker thread."""

    def __init__(self, model_ptr: Any, n_vocab: int, params: ContextParams) -> None:
        cp = C.llama_context_default_params()
        cp.n_ctx = params.n_ctx
        cp.n_batch = params.n_batch
        cp.n_ubatch = params.n_ubatch
        cp.n_seq_max = params.n_seq_max
        cp.n_threads = params.n_threads
        cp.n_threads_batch = params.n_threads_batch or params.n_threads
        cp.embeddings = params.embeddings
        cp.pooling_type = params.pooling
        cp.kv_unified = params.kv_unified
        cp.flash_attn_type = params.flash_attn
        cp.type_k = params.type_k
        cp.type_v = params.type_v
        cp.no_perf = True
        ctx = C.llama_init_from_model(model_ptr, cp)
        if not ctx:
            raise LoadFailed("llama.cpp could not create a context (out of memory or bad params)")
        self.ptr: Any = ctx
        #: What llama.cpp logged about its buffers (set by `Model.new_context`).
        self.placement: Any = None
        self.n_vocab = n_vocab
        self.n_ctx = int(C.llama_n_ctx(ctx))
        self.n_batch = int(C.llama_n_batch(ctx))
        self.n_seq_max = int(C.llama_n_seq_max(ctx))
        self.pooling = int(C.llama_pooling_type(ctx))
        self.memory: Any = C.llama_get_memory(ctx)
        self.num_removals = 0
        self.n_threads = params.n_threads
        #: A fixed batch thread count (--threads-batch); 0: it follows `set_threads`.
        self.fixed_threads_batch = params.n_threads_batch
        self._adapter: Any = None
        self._views: dict[int, Any] = {}
        self._row_type = ctypes.c_float * n_vocab

    def decode(self, batch: TokenBatch) -> int:
        """Run the model on the batch; 0 on success (llama_decode's return code)."""
        native = cast(Batch, batch)
        native.raw.n_tokens = native.n_tokens
        try:
            return int(C.llama_decode(self.ptr, native.raw))
        except ctypes.ArgumentError as exc:
            raise EngineError(f"llama_decode could not be called: {exc}") from exc

    # -- memory (KV cache), sequence-scoped only ----------------------------------------
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of one sequence; False if a partial removal failed."""
        if not self.memory:
            return True
        self.num_removals += 1
        return bool(C.llama_memory_seq_rm(self.memory, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Tag `src`'s cells at positions [p0, p1) with `dst` too (unified KV: shared)."""
        if self.memory:
            C.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_state(self, seq_id: int) -> SeqState | None:
        """A copy of one sequence's KV cells (llama.cpp's per-sequence state), or None."""
        size = int(C.llama_state_seq_get_size(self.ptr, seq_id))
        if size <= 0:
            return None
        buf = (ctypes.c_ubyte * size)()
        if int(C.llama_state_seq_get_data(self.ptr, buf, size, seq_id)) != size:
            return None
        return buf

    def restore_seq_state(self, seq_id: int, state: SeqState) -> bool:
        """Put a `seq_state()` copy back into the (now empty) sequence. llama.cpp places it
        in the first free run of cells, so this moves the sequence down into holes."""
        if isinstance(state, bytes):  # a copy read back from disk (see cache.spill)
            state = (ctypes.c_ubyte * len(state)).from_buffer_copy(state)
        size = len(state)
        return int(C.llama_state_seq_set_data(self.ptr, state, size, seq_id)) == size

    def logits_row(self, row: int) -> Logits:
        """A copy of the logits of batch row `row` of the last decode (numpy float32)."""
        return self.logits_view(row).copy()

    def logits_addr(self, row: int) -> int:
        """The address of batch row `row`'s logits (n_vocab floats) in llama.cpp's
        buffer, valid until the next decode."""
        addr = _logits_at(self.ptr, row)
        if not addr:
            raise EngineError(f"llama.cpp returned no logits for batch row {row}")
        return int(addr)

    def logits_view(self, row: int) -> Any:
        """The logits of batch row `row` of the last decode, in place (numpy float32):
        valid until the next decode. A view is kept per address llama.cpp returns; it is
        only read again when llama.cpp returns that address again, so it is valid then."""
        addr = self.logits_addr(row)
        view = self._views.get(addr)
        if view is None:
            if len(self._views) >= _MAX_VIEWS:
                self._views.clear()
            view = np.frombuffer(memoryview(self._row_type.from_address(addr)), np.float32)
            self._views[addr] = view
        return view

    def set_threads(self, n: int) -> None:
        """Decode with `n` threads from the next decode on (and prefill too, unless the
        batch thread count is fixed)."""
        if n != self.n_threads:
            C.llama_set_n_threads(self.ptr, n, self.fixed_threads_batch or n)
            self.n_threads = n

    def set_adapter(self, adapter: Any | None) -> None:
        """Apply one LoRA adapter at scale 1 (or none) to the following decodes."""
        if adapter is self._adapter:
            return
        if adapter is None:
            rc = C.llama_set_adapters_lora(self.ptr, None, 0, None)
        else:
            handles = (C.llama_adapter_lora_p_ctypes * 1)(adapter)
            scales = (ctypes.c_float * 1)(1.0)
            rc = C.llama_set_adapters_lora(self.ptr, handles, 1, scales)
        if rc != 0:
            raise EngineError(f"llama_set_adapters_lora failed ({rc})")
        self._adapter = adapter

    def embeddings_seq(self, seq_id: int, n: int) -> list[float]:
        """The pooled embedding (or rank scores) of one sequence of the last decode."""
        ptr = C.llama_get_embeddings_seq(self.ptr, seq_id)
        if not ptr:
            raise EngineError("llama.cpp returned no pooled embedding for the sequence")
        return [float(x) for x in ptr[:n]]

    def close(self) -> None:
        if self.ptr:
            C.llama_free(self.ptr)
            self.ptr = None
