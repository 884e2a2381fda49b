"""What the engine needs from llama.cpp, as small protocols.

The workers talk to llama.cpp only through these. `native` implements them over
llama-cpp-python's C bindings; the unit tests implement them with a tiny in-memory fake
(`tests/engine/fake_llama.py`), so scheduling and KV bookkeeping run without a model.

Threads: a `LlamaModel` is loaded once and then only read, by any thread. A context, its
batch and its samplers belong to the one worker thread that made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from juggler.engine.llama.sampling import SamplingParams

#: One sequence's KV cells copied out of a context (opaque; see `LlamaContext.seq_state`).
SeqState = Any
#: A copy of the logits of one batch row (opaque; see `LlamaContext.logits_row`).
Logits = Any
#: A LoRA adapter loaded for a model (opaque; see `LlamaModel.load_adapter`).
Adapter = Any


@dataclass(frozen=True)
class ContextParams:
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_threads: int
    embeddings: bool = False
    #: Threads of decodes of more than one token (llama.cpp's n_threads_batch); 0: as
    #: n_threads, and as the thread count `set_threads` gives.
    n_threads_batch: int = 0
    #: llama.cpp's pooling type; -1 lets the model decide.
    pooling: int = -1
    kv_unified: bool = True
    #: llama.cpp's flash-attention switch: -1 auto (on where supported), 0 off, 1 on.
    flash_attn: int = -1


class Vocab(Protocol):
    """The model's vocabulary. Read-only: any thread may call it."""

    @property
    def n_vocab(self) -> int: ...

    @property
    def add_bos(self) -> bool: ...

    def tokenize(
        self, text: str, *, add_special: bool, parse_special: bool = True
    ) -> list[int]: ...

    def piece(self, token: int) -> bytes:
        """The bytes of one token as generated text (control tokens render empty)."""
        ...

    def is_eog(self, token: int) -> bool: ...

    def eog_tokens(self) -> tuple[int, ...]:
        """Every end-of-generation token of the vocabulary."""
        ...


class TokenBatch(Protocol):
    """A batch of at most `capacity` tokens, each in exactly one sequence."""

    @property
    def capacity(self) -> int: ...

    #: Tokens in the batch now.
    n_tokens: int

    def clear(self) -> None: ...

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its row (the index its logits are read by)."""
        ...

    def close(self) -> None: ...


class LlamaContext(Protocol):
    """One context: KV cells shared by up to `n_seq_max` sequences (unified KV)."""

    @property
    def n_ctx(self) -> int: ...

    @property
    def num_removals(self) -> int:
        """How many `seq_rm` calls ran (the worker compacts after some, when idle)."""
        ...

    def decode(self, batch: TokenBatch) -> int:
        """Run the model on the batch; 0 on success, else llama_decode's return code
        (part of the batch may have reached the KV cache)."""
        ...

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of one sequence (-1: open end); False when the memory
        cannot remove a partial range (e.g. sliding-window caches)."""
        ...

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Let sequence `dst` share `src`'s cells at positions [p0, p1) (-1: open end):
        with a unified KV cache the cells are not copied, only tagged with `dst` too."""
        ...

    def seq_state(self, seq_id: int) -> SeqState | None:
        """A copy of one sequence's KV cells, or None."""
        ...

    def restore_seq_state(self, seq_id: int, state: SeqState) -> bool:
        """Put a `seq_state()` copy back into the (empty) sequence, in the first free run
        of cells; False when it does not fit."""
        ...

    def logits_row(self, row: int) -> Logits:
        """A copy of the logits of batch row `row` of the last decode."""
        ...

    def set_threads(self, n: int) -> None:
        """Decode with `n` threads from the next decode on (the compute plan)."""
        ...

    def set_adapter(self, adapter: Adapter | None) -> None:
        """Apply this LoRA adapter (scale 1) to the following decodes, or none; cheap
        when it is already the applied one."""
        ...

    def close(self) -> None: ...


class TokenSampler(Protocol):
    """One generation's sampler chain, bound to the context it samples from."""

    def sample(self, row: int) -> int:
        """Sample (and accept) a token from the logits of row `row` of the last decode."""
        ...

    def sample_logits(self, logits: Logits) -> int:
        """Sample (and accept) a token from saved logits, as `sample` does from a row."""
        ...

    def lead(self, row: int, token: int) -> float:
        """How far `token`'s logit in row `row` of the last decode is above the best of
        the others' (a greedy draw's near-ties, `schedule.ties`)."""
        ...

    def close(self) -> None: ...


class LlamaModel(Vocab, Protocol):
    """A loaded model as the engine sees it: vocabulary, what chat templates need, and
    the factory of each worker's own context, batch and samplers (called on that
    worker's thread)."""

    @property
    def bos(self) -> int: ...

    @property
    def eos(self) -> int: ...

    @property
    def architecture(self) -> str: ...

    def special_text(self, token: int) -> str:
        """The text of a (special) token as a template writes it, e.g. "<s>"."""
        ...

    def chat_template(self, name: str | None = None) -> str | None: ...

    def new_context(self, params: ContextParams) -> LlamaContext:
        """Raises LoadFailed when the context cannot be created."""
        ...

    def new_batch(self, capacity: int) -> TokenBatch: ...

    def new_sampler(
        self, ctx: LlamaContext, params: SamplingParams, *, banned: Sequence[int] = ()
    ) -> TokenSampler:
        """A sampler chain for one generation; `banned` tokens are never sampled. Raises
        BadRequest when `params.grammar` cannot be parsed."""
        ...

    def check_grammar(self, grammar: str) -> None:
        """Raise BadRequest when llama.cpp cannot parse this GBNF grammar (any thread)."""
        ...

    def load_adapter(self, path: str) -> Adapter:
        """Load a GGUF LoRA adapter for this model (on the worker thread that will apply
        it); raises BadRequest when the file is not one that fits the model."""
        ...

    def free_adapter(self, adapter: Adapter) -> None:
        """Free an adapter no context applies any more."""
        ...
