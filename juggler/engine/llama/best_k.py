"""A draw over the k best tokens of a logits row (issue 47), for a sampler chain whose
top_k decides and nothing before it changes the logits but banned tokens (see
`native_sampler.Sampler.top_k`).

llama.cpp's `llama_sampler_sample` copies the whole vocabulary into a candidate array
and partially sorts it for top_k; every later step of the chain (top_p, min_p,
temperature, the seeded draw) sees only those k tokens, sorted by logit. So the chain
applied to exactly the k best, best first, draws what it draws over the vocabulary.
They are found by the compiled kernel (`top_k.c`, straight from llama.cpp's logits
buffer into the candidate array, about 4 microseconds for a 49,152-token row) or, where
it was not built, by numpy (`top_k.top_candidates`, the same tokens in the same order).
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp.llama_cpp as C
import numpy as np

from juggler.engine.llama.native_context import Context
from juggler.engine.llama.top_k import GUESS, STRIDE, WIDER, top_candidates
from juggler.engine.llama.top_k_native import (
    DrawSpec,
    native_draw,
    native_draw_changed,
    native_note,
    native_top_k,
)
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


#: Tokens a sampler's ring of accepted tokens holds: penalties that remember more than
#: this leave a draw to the whole chain once more were accepted (`top_k.c`).
RING_CAP = 1024
#: top_k.c's MAX_CANDIDATES: a draw's candidate array holds twice as many at most.
MAX_CANDIDATES = 256


class BestK:
    """The k-entry candidate array of one sampler, refilled each draw.

    `changed` and `window`: the chain changes the logits of the tokens in `changed` (a
    logit bias) and of those accepted in the last `window` draws (penalties) before its
    top_k; the compiled draw adds them to the candidates (`top_k.c`). Only with the
    compiled draw (`sparse_draws`)."""

    def __init__(
        self,
        ctx: Context,
        n_vocab: int,
        k: int,
        banned: Any | None,
        *,
        native: bool = True,
        changed: tuple[int, ...] = (),
        window: int = 0,
    ) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.k = k
        self.banned = banned  # a read-only boolean mask over the vocabulary, or None
        self.kernel = native_top_k() if native else None
        self.sparse = bool(changed or window)
        draws = native_draw_changed if self.sparse else native_draw
        self.drawer = draws() if native and self.kernel is not None else None
        if self.sparse and (self.drawer is None or native_note() is None):
            raise ValueError("changed logits need the compiled draw (sparse_draws)")
        self.few = Candidates.empty(2 * MAX_CANDIDATES if self.sparse else k)
        # The draw's memory of the tokens that change (see top_k.c); numpy owns it.
        self._changed = np.asarray(changed, dtype=np.int32)
        self._ring = np.zeros(min(window, RING_CAP), dtype=np.int32)
        self._window = window
        self._scratch = np.zeros(len(changed) + self._ring.shape[0], dtype=np.int32)
        self._marks = np.zeros(n_vocab if self.sparse else 0, dtype=np.uint8)
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

    def draw(self, chain: Any, row: int) -> int | None:
        """Apply `chain` to the k best of row `row` and accept its draw: in one call to
        the compiled draw where it was built, else four. None: the row is left to the
        chain over the whole vocabulary (too many changed logits; see top_k.c), and
        whatever it accepts is `note`d."""
        if self.drawer is not None:
            ref = self._spec_ref if self._spec_chain is chain else self._spec(chain)
            token: int = self.drawer(ref, row)
            if token == -3:
                return None
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

    def note(self, token: int) -> None:
        """`chain` accepted `token` outside `draw`: the penalties' memory follows."""
        note = native_note() if self.sparse else None
        if note is not None:
            note(self._spec(None), token)

    def _spec(self, chain: Any) -> Any:
        """The compiled draw's spec (made once, its chain set when it changes)."""
        if self._spec_ref is None:
            self._spec_ref = ctypes.byref(self._spec_for(chain))
            self._spec_chain = chain
        elif chain is not None and self._spec_chain is not chain:
            self._spec_ref._obj.chain = ctypes.cast(chain, ctypes.c_void_p).value
            self._spec_chain = chain
        return self._spec_ref

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
            fixed=self._changed.ctypes.data,
            n_fixed=self._changed.shape[0],
            ring=self._ring.ctypes.data,
            ring_cap=self._ring.shape[0],
            window=self._window,
            accepted=0,
            changed=self._scratch.ctypes.data,
            marks=self._marks.ctypes.data,
        )


def _address(fn: Any) -> int | None:
    """The address of a function of llama.cpp's library."""
    return ctypes.cast(fn, ctypes.c_void_p).value
