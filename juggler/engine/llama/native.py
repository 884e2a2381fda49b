"""The one boundary with llama.cpp: the loaded model, its vocabulary, and the factory of
each worker's context, batch and samplers (`ports.LlamaModel`, over llama-cpp-python's
low-level ctypes bindings; the per-worker objects are in `native_context`).

llama.cpp failures become Juggler errors here: a model or context that cannot be created
is `LoadFailed` (a missing file `CheckpointMissing`), a failed call `EngineError`.

Thread rules: `Model` is loaded once by the main thread and then only read. Tokenizing
and turning tokens into text read the vocabulary, so any thread may call them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp.llama_cpp as C

from juggler.engine.llama.native_context import Batch, Context
from juggler.engine.llama.native_sampler import Sampler, check_grammar
from juggler.engine.llama.placement import TAP, Recording
from juggler.engine.llama.ports import ContextParams, LlamaContext
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.thinking.budget import BudgetSampler
from juggler.errors import BadRequest, CheckpointMissing, EngineError, LoadFailed

log = logging.getLogger(__name__)

_backend_lock = threading.Lock()
_backend_ready = False


def init_backend(*, verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log through ours."""
    global _backend_ready
    with _backend_lock:
        if _backend_ready:
            return
        # llama-cpp-python prints every llama.cpp log line unless its logger says otherwise.
        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
        import llama_cpp._logger  # noqa: F401  (installs its log callback, replaced here)

        # Ours reads what llama.cpp placed on which device (`placement`).
        TAP.install(verbose=verbose)
        C.llama_backend_init()
        _backend_ready = True


def supports_gpu_offload() -> bool:
    return bool(C.llama_supports_gpu_offload())


def offloaded_layers(model: Model) -> int:
    """The layers llama.cpp said it offloaded while loading `model` (0 when it said
    nothing: a library without GPU offload, or no GPU device)."""
    said = model.placement.offloaded
    return said[0] if said is not None and supports_gpu_offload() else 0


class Model:
    """A loaded `llama_model` and its vocabulary; read-only after construction.

    `placement` is what llama.cpp logged while loading it: the layers it offloaded and
    the model buffers on each device. With `n_gpu_layers` 0 the model gets no GPU at all
    (an empty device list), so a CPU load of a GPU build runs and reports as the CPU."""

    def __init__(self, path: str, *, n_gpu_layers: int = 0, use_mmap: bool = True) -> None:
        init_backend()
        if not os.path.isfile(path):
            raise CheckpointMissing(f"model file not found: {path}")
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        no_devices = (ctypes.c_void_p * 1)()  # NULL-terminated: none
        if n_gpu_layers == 0:
            params.devices = ctypes.addressof(no_devices)
        if not use_mmap:  # llama-server's --no-mmap: read the file into memory
            params.load_mode = C.LLAMA_LOAD_MODE_NONE
        with TAP.record() as recording:
            model = C.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise LoadFailed(f"llama.cpp could not load the model file {path}")
        self.placement: Recording = recording
        self.ptr: Any = model
        self.vocab: Any = C.llama_model_get_vocab(model)
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(C.llama_model_n_ctx_train(model))
        self.n_embd = int(C.llama_model_n_embd(model))
        self.n_cls_out = int(C.llama_model_n_cls_out(model))
        self.add_bos = bool(C.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(C.llama_vocab_get_add_eos(self.vocab))
        self.add_sep = bool(C.llama_vocab_get_add_sep(self.vocab))
        self.bos = int(C.llama_vocab_bos(self.vocab))
        self.eos = int(C.llama_vocab_eos(self.vocab))
        self.sep = int(C.llama_vocab_sep(self.vocab))
        self.architecture = self.meta("general.architecture") or "unknown"
        #: Layers as llama.cpp counts them for offloading: the repeating ones and the output.
        self.num_layers = int(C.llama_model_n_layer(model)) + 1
        self._pieces: dict[int, bytes] = {}
        #: Whether each token asked about so far ends generation (asked every token).
        self._is_eog: dict[int, bool] = {}
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
            raise EngineError(f"llama_tokenize failed ({n})")
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

    def is_eog(self, token: int) -> bool:
        known = self._is_eog.get(token)
        if known is None:
            known = self._is_eog[token] = bool(C.llama_vocab_is_eog(self.vocab, token))
        return known

    def eog_tokens(self) -> tuple[int, ...]:
        """Every end-of-generation token of the vocabulary (computed once)."""
        if self._eog is None:
            is_eog, vocab = C.llama_vocab_is_eog, self.vocab
            self._eog = tuple(t for t in range(self.n_vocab) if is_eog(vocab, t))
        return self._eog

    # -- per-worker objects (called on the worker thread that will own them) -----------
    def new_context(self, params: ContextParams) -> Context:
        """A context; its `placement` is what llama.cpp logged making it (its buffers)."""
        with TAP.record() as recording:
            ctx = Context(self.ptr, self.n_vocab, params)
        ctx.placement = recording
        return ctx

    def new_batch(self, capacity: int) -> Batch:
        return Batch(capacity)

    def new_sampler(
        self, ctx: LlamaContext, params: SamplingParams, *, banned: Sequence[int] = ()
    ) -> Sampler | BudgetSampler:
        eog = self.eog_tokens()
        inner = Sampler(self.vocab, self.n_vocab, ctx, params, banned, eog[0] if eog else self.eos)
        if params.think_budget < 0 or not params.think_form:
            return inner
        return BudgetSampler(
            inner,
            budget=params.think_budget,
            form=params.think_form,
            piece=self.piece,
            tokenize=lambda text: self.tokenize(text, add_special=False),
        )

    def check_grammar(self, grammar: str) -> None:
        """BadRequest when llama.cpp cannot parse the GBNF grammar (any thread)."""
        check_grammar(self.vocab, grammar)

    # -- LoRA adapters (the worker thread that applies them) -----------------------------
    def load_adapter(self, path: str) -> Any:
        """`llama_adapter_lora_init`: llama.cpp checks the file is a LoRA adapter whose
        architecture and tensor shapes fit this model."""
        if not os.path.isfile(path):
            raise BadRequest(f"LoRA adapter file not found: {path}", param="lora_path")
        handle = C.llama_adapter_lora_init(self.ptr, path.encode())
        if not handle:
            raise BadRequest(
                f"{path} is not a LoRA adapter for {self.architecture} model of this shape",
                param="lora_path",
            )
        return handle

    def free_adapter(self, adapter: Any) -> None:
        C.llama_adapter_lora_free(adapter)
