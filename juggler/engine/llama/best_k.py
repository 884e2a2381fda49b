"""A draw over the k best tokens of a logits row (issue 47), for a sampler chain whose
top_k decides and nothing before it changes the logits but banned tokens (see
`native_sampler.Sampler.top_k`).

llama.cpp's `llama_sampler_sample` copies the whole vocabulary into a candidate array
and partially sorts it for top_k; every later step of the chain (top_p, min_p,
temperature, the seeded draw) sees only those k tokens, sorted by logit. So the chain
applied to exactly the k best, best first, draws what it draws over the vocabulary.
They are found by the compiled kernel (`top_k.c`, straight from llama.cpp's logits
buffer into the candidate array, about 10 microseconds for a 49,152-token row) or, where
it was not built, by numpy (`top_k.top_candidates`, the same tokens in the same order).
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp.llama_cpp as C
import numpy as np

from juggler.engine.llama.native_context import Context
from juggler.engine.llama.top_k import GUESS, STRIDE, WIDER, top_candidates
from juggler.engine.llama.top_k_native import DrawSpec, native_draw, native_top_k
from juggler.errors import EngineError

#: numpy's view of `llama_token_data` {int32 id; float logit; float p}.
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class Candidates:
    """A `llama_token_data_array` over a numpy buffer (ids, logits)."""

    def __init__(self, ids: Any, logits: Any) -> None:
        n = int(ids.shape[0])
        self.data = (C.llama_token_data * n)()
        self.addr = ctypes.addressof(self.data)
        self.view = np.frombuffer(memoryview(self.data).cast("B"), dtype=TOKEN_DATA)
        self.arr = C.llama_token_data_array(data=self.data, size=n, selected=-1, sorted=False)
        self.arr_ref = ctypes.byref(self.arr)
        self.refill(ids, logits)

    @classmethod
    def empty(cls, capacity: int) -> Candidates:
        return cls(np.zeros(capacity, dtype=np.int32), np.zeros(capacity, dtype=np.float32))

    def refill(self, ids: Any, logits: Any, *, is_sorted: bool = False) -> None:
        """Reuse the buffer (samplers reorder and shrink the array in place)."""
        n = int(ids.shape[0])
        self.view["id"][:n] = ids
        self.view["logit"][:n] = logits
        self.view["p"][:n] = 0.0
        self.arr.size, self.arr.selected, self.arr.sorted = n, -1, is_sorted

    def apply(self, sampler: Any) -> None:
        C.llama_sampler_apply(sampler, self.arr_ref)

    def num_allowed(self) -> int:
        return int(np.isfinite(self.view["logit"][: self.arr.size]).sum())

    def selected(self) -> int:
        if not 0 <= self.arr.selected < self.arr.size:
            raise EngineError("the sampler chain selected no token")
        return int(self.arr.data[self.arr.selected].id)


class BestK:
    """The k-entry candidate array of one sampler, refilled each draw."""

    def __init__(
        self, ctx: Context, n_vocab: int, k: int, banned: Any | None, *, native: bool = True
    ) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.k = k
        self.banned = banned  # a read-only boolean mask over the vocabulary, or None
        self.kernel = native_top_k() if native else None
        self.drawer = native_draw() if native and self.kernel is not None else None
        self.few = Candidates.empty(k)
        self.banned_addr = banned.ctypes.data if banned is not None else None
        # The threshold guess (see top_k.py): the GUESS-th best of every STRIDE-th logit
        # holds about GUESS * STRIDE tokens; twice k at least.
        self.guess = GUESS if k * 2 <= GUESS * STRIDE else WIDER
        #: A reference to the compiled draw's spec (it holds the spec), and the chain it
        #: was set for (`draw`).
        self._spec_ref: Any = None
        self._spec_chain: Any = None

    def fill(self, row: int) -> int:
        """The k best allowed tokens of batch row `row` into the array, best first;
        returns how many (fewer where fewer are allowed)."""
        few = self.few
        if self.kernel is None:
            ids, logits = top_candidates(self.ctx.logits_view(row), self.k, self.banned)
            few.refill(ids, logits, is_sorted=True)
            return int(ids.shape[0])
        found: int = self.kernel(
            self.ctx.logits_addr(row),
            self.n_vocab,
            self.k,
            self.banned_addr,
            STRIDE,
            self.guess,
            few.addr,
        )
        few.arr.size, few.arr.selected, few.arr.sorted = found, -1, True
        return found

    def draw(self, chain: Any, row: int) -> int:
        """Apply `chain` to the k best of row `row` and accept its draw: in one call to
        the compiled draw where it was built, else four."""
        if self.drawer is not None:
            if self._spec_chain is not chain:
                self._spec_ref, self._spec_chain = ctypes.byref(self._spec_for(chain)), chain
            token: int = self.drawer(self._spec_ref, row)
            if token == -1:
                raise EngineError(f"llama.cpp returned no logits for batch row {row}")
            if token < 0:
                raise EngineError("the sampler chain selected no token")
            return token
        self.fill(row)
        self.few.apply(chain)
        token = self.few.selected()
        C.llama_sampler_accept(chain, token)
        return token

    def _spec_for(self, chain: Any) -> DrawSpec:
        return DrawSpec(
            ctx=ctypes.cast(self.ctx.ptr, ctypes.c_void_p).value,
            logits_at=_address(C._lib.llama_get_logits_ith),
            chain=ctypes.cast(chain, ctypes.c_void_p).value,
            apply=_address(C._lib.llama_sampler_apply),
            accept=_address(C._lib.llama_sampler_accept),
            arr=ctypes.addressof(self.few.arr),
            banned=self.banned_addr,
            n_vocab=self.n_vocab,
            k=self.k,
            stride=STRIDE,
            guess=self.guess,
        )


def _address(fn: Any) -> int | None:
    """The address of a function of llama.cpp's library."""
    return ctypes.cast(fn, ctypes.c_void_p).value
