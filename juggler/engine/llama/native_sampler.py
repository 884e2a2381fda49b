"""One generation's `llama_sampler` chains, over llama-cpp-python's ctypes bindings
(`ports.TokenSampler`), and llama.cpp's grammar check.

Two chains: `pre` changes the logits (logit bias, repetition penalties, OpenAI's
frequency and presence penalties) and `post` draws from them (top_k, top_p, min_p,
temperature, then a seeded draw, or greedy at temperature 0). Without a grammar both run
inside one `llama_sampler_sample` call, in C.

With a grammar (response_format, tools, `grammar`), a constrained sequence pays only its
own sampling, as llama.cpp's common sampler does: draw as usual, then check that one
token against the grammar (microseconds). Only when the grammar rejects it is the draw
made again over the tokens the grammar allows: first among those whose logit is close to
the best (enough when greedy, top_k or min_p decide anyway: see `_redraw`), else over
the whole vocabulary (milliseconds for a 50k vocabulary). A token is only ever accepted by the grammar after the grammar allowed
it (llama.cpp aborts the process otherwise); when it allows nothing at all (it is
complete and end-of-generation is banned), an end-of-generation token ends the output.

Owned by the worker thread of the context it samples from.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from typing import Any, cast

import llama_cpp.llama_cpp as C
import numpy as np

from juggler.engine.llama.best_k import BestK, Candidates
from juggler.engine.llama.native_context import Context
from juggler.engine.llama.ports import LlamaContext, Logits
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.llama.top_k_native import sparse_draws
from juggler.errors import BadRequest

#: When a drawn token breaks the grammar, the redraw first looks among the tokens whose
#: logit is within this much of the best (e^-8: a 3000 times less likely token), then
#: twice as far, before the whole vocabulary (see the module doc).
_MARGINS = (8.0, 16.0)


#: Longest a constrained sequence may spend following its grammar for one token. A
#: usable grammar takes milliseconds even when a draw over the whole vocabulary is
#: needed (tens of them for a 256k vocabulary on a busy machine); an ambiguous one can
#: take seconds a token, and it is stopped after the first such step.
GRAMMAR_STEP_BUDGET_S = 1.0


class GrammarTooSlow(BadRequest):
    code = "grammar_too_complex"


def parse_grammar(vocab: Any, grammar: str) -> Any:
    """A grammar sampler for `grammar` (GBNF, start rule `root`); BadRequest when
    llama.cpp cannot parse it (its reason goes to the backend's log)."""
    ptr = C.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not ptr:
        raise BadRequest(
            "grammar: llama.cpp could not parse this GBNF grammar (start rule: root)",
            param="grammar",
        )
    return ptr


def check_grammar(vocab: Any, grammar: str) -> None:
    C.llama_sampler_free(parse_grammar(vocab, grammar))


#: Largest top_k sampled over the k best tokens (llama.cpp sorts up to 128 with a plain
#: partial sort, in the order `best_k.BestK` reproduces).
MAX_FAST_TOP_K = 128


def _changes(p: SamplingParams, banned: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """What changes logits before top_k besides the banned tokens' -inf: the tokens a
    logit bias changes, and how many of the last accepted tokens the penalties look at
    (0: none; as `_fill_pre` sets the chain up)."""
    out = set(banned)
    changed = tuple(dict.fromkeys(t for t, _ in p.logit_bias if t not in out))
    window = 0
    if p.repeat_penalty != 1.0:
        window = max(window, p.penalty_last_n)
    if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
        window = max(window, p.max_new_tokens, 1)
    return changed, window


@functools.lru_cache(maxsize=8)
def _mask(n_vocab: int, banned: tuple[int, ...]) -> Any:
    mask = np.zeros(n_vocab, dtype=bool)
    mask[list(banned)] = True
    mask.flags.writeable = False
    return mask


@functools.lru_cache(maxsize=8)
def _ids(n_vocab: int) -> Any:
    """Every token id in order, read-only and shared by the samplers of a vocabulary
    (each one making its own was a 200 KB allocation a request on a 49k vocabulary)."""
    ids = np.arange(n_vocab, dtype=np.int32)
    ids.flags.writeable = False
    return ids


def _chain() -> Any:
    return C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())


class Sampler:
    """The sampler chains of one generation on one worker thread (see the module doc)."""

    def __init__(
        self,
        vocab: Any,
        n_vocab: int,
        ctx: LlamaContext,
        params: SamplingParams,
        banned: Sequence[int],
        eog: int,
    ) -> None:
        self.ctx = cast(Context, ctx)
        self.n_vocab = n_vocab
        self.eog = eog
        self.grammar: Any = parse_grammar(vocab, params.grammar) if params.grammar else None
        self.pre, self.post = _chain(), _chain()
        changes_logits = self._fill_pre(params, banned)
        self._fill_post(params)
        #: Plain greedy (nothing changes the logits, no grammar): the draw is the first
        #: best logit, as llama.cpp's greedy sampler takes it, read without copying the
        #: vocabulary into a candidate array (tens of microseconds a token).
        self.argmax = self.grammar is None and not changes_logits and params.temperature <= 0.0
        #: A draw over the k best tokens (`best_k`): sampling with 0 < top_k <= 128, or
        #: greedy (k = 1) where something changes the logits, and with nothing before
        #: top_k changing the logits but banned tokens, or with the compiled draw, which
        #: adds the tokens a logit bias or the penalties change (`top_k.c`). 0: the
        #: chain runs over the whole vocabulary.
        k = 1 if params.temperature <= 0.0 else params.top_k
        changed, window = _changes(params, banned)
        self.top_k = (
            k
            if self.grammar is None
            and 0 < k <= MAX_FAST_TOP_K
            and (not (changed or window) or sparse_draws())
            else 0
        )
        self.banned = _mask(n_vocab, tuple(banned)) if self.top_k and banned else None
        self._best = (
            BestK(self.ctx, n_vocab, self.top_k, self.banned, changed=changed, window=window)
            if self.top_k
            else None
        )
        #: How many best candidates a redraw needs to be exact (None: all of them).
        self.need: int | None = 1 if params.temperature <= 0.0 else (params.top_k or None)
        #: min_p drops every token this far (in logits) below the best one left.
        sampling = params.temperature > 0.0 and params.min_p > 0.0
        self.min_p_gap = -math.log(params.min_p) if sampling else None
        self.ids = _ids(n_vocab)
        self._full: Candidates | None = None
        # One chain owning both (a chain is a sampler), for the unconstrained fast path.
        self.ptr: Any = _chain()
        C.llama_sampler_chain_add(self.ptr, self.pre)
        C.llama_sampler_chain_add(self.ptr, self.post)

    def _fill_pre(self, p: SamplingParams, banned: Sequence[int]) -> bool:
        """Fill the chain that changes the logits; False if it has nothing to do."""
        biases = [(t, float("-inf")) for t in banned] + list(p.logit_bias)
        if biases:
            arr = (C.llama_logit_bias * len(biases))()
            for i, (tok, bias) in enumerate(biases):
                arr[i].token = tok  # type: ignore[assignment]
                arr[i].bias = bias
            add = C.llama_sampler_init_logit_bias(self.n_vocab, len(biases), arr)
            C.llama_sampler_chain_add(self.pre, add)
        if p.repeat_penalty != 1.0:
            C.llama_sampler_chain_add(
                self.pre,
                C.llama_sampler_init_penalties(
                    self.n_vocab, p.penalty_last_n, p.repeat_penalty, 0.0, 0.0
                ),
            )
        if p.frequency_penalty != 0.0 or p.presence_penalty != 0.0:
            # OpenAI's penalties count every token generated so far, not a recent window.
            window = max(1, p.max_new_tokens)
            C.llama_sampler_chain_add(
                self.pre,
                C.llama_sampler_init_penalties(
                    self.n_vocab, window, 1.0, p.frequency_penalty, p.presence_penalty
                ),
            )
        return int(C.llama_sampler_chain_n(self.pre)) > 0

    def _fill_post(self, p: SamplingParams) -> None:
        if p.temperature <= 0.0:
            C.llama_sampler_chain_add(self.post, C.llama_sampler_init_greedy())
            return
        if p.top_k > 0:
            C.llama_sampler_chain_add(self.post, C.llama_sampler_init_top_k(p.top_k))
        if 0.0 < p.top_p < 1.0:
            C.llama_sampler_chain_add(self.post, C.llama_sampler_init_top_p(p.top_p, 1))
        if p.min_p > 0.0:
            C.llama_sampler_chain_add(self.post, C.llama_sampler_init_min_p(p.min_p, 1))
        C.llama_sampler_chain_add(self.post, C.llama_sampler_init_temp(p.temperature))
        seed = p.resolved_seed() & 0xFFFFFFFF
        C.llama_sampler_chain_add(self.post, C.llama_sampler_init_dist(seed))

    # -- sampling ---------------------------------------------------------------------
    def sample(self, row: int) -> int:
        """Sample (and accept) a token from the logits of batch row `row`."""
        if self.argmax:
            return int(self.ctx.logits_view(row).argmax())
        best = self._best
        if best is not None:
            token = best.draw(self.ptr, row)
            if token is not None:
                return token
            token = int(C.llama_sampler_sample(self.ptr, self.ctx.ptr, row))
            best.note(token)
            return token
        if self.grammar is None:
            return int(C.llama_sampler_sample(self.ptr, self.ctx.ptr, row))
        return self._constrained(self.ctx.logits_view(row))

    def lead(self, row: int, token: int) -> float:
        """How far `token`'s logit in row `row` is above the best other one (read in
        place: two passes over the row, a few microseconds)."""
        view = self.ctx.logits_view(row)
        other = max(view[:token].max(initial=-np.inf), view[token + 1 :].max(initial=-np.inf))
        return float(view[token] - other)

    def sample_logits(self, logits: Logits) -> int:
        """Sample (and accept) a token from saved logits, as `sample` does from a row."""
        if self.grammar is not None:
            return self._constrained(logits)
        cand = Candidates(np.arange(logits.shape[0], dtype=np.int32), logits)
        cand.apply(self.ptr)
        token = cand.selected()
        C.llama_sampler_accept(self.ptr, token)
        if self._best is not None:
            self._best.note(token)
        return token

    def _allows(self, token: int) -> bool:
        one = Candidates(np.array([token], dtype=np.int32), np.zeros(1, dtype=np.float32))
        one.apply(self.grammar)
        return bool(np.isfinite(one.view["logit"][0]))

    def _constrained(self, logits: Any) -> int:
        started = time.perf_counter()
        token = self._constrained_draw(logits)
        took = time.perf_counter() - started
        if took > GRAMMAR_STEP_BUDGET_S:
            # Issue 27: an ambiguous grammar (a pattern like (a|aa|a?){1,1000}) makes each
            # step slower than the last while it holds this worker's other sequences.
            raise GrammarTooSlow(
                f"grammar: following it took {took:.2f} s for one token (the budget is "
                f"{GRAMMAR_STEP_BUDGET_S} s): it is too ambiguous; simplify the "
                "pattern, schema or grammar",
                param="grammar",
            )
        return token

    def _constrained_draw(self, logits: Any) -> int:
        ids = self.ids
        if self._full is None:
            self._full = Candidates(ids, logits)
        else:
            self._full.refill(ids, logits)
        cand = self._full
        cand.apply(self.pre)
        biased = cand.view["logit"].copy()  # `post` reorders the array in place
        cand.apply(self.post)
        token = cand.selected()
        if not self._allows(token):
            redrawn = self._redraw(ids, biased)
            if redrawn is None:  # the grammar allows nothing: end the output
                return self.eog
            token = redrawn
        C.llama_sampler_accept(self.grammar, token)
        C.llama_sampler_accept(self.ptr, token)
        return token

    def _redraw(self, ids: Any, biased: Any) -> int | None:
        """Draw again among the tokens the grammar allows (None: it allows none).

        The near candidates suffice when (a) they hold at least `need` allowed tokens:
        every allowed token outside has a lower logit than all of them, so greedy or
        top_k keeps the same tokens as over the whole vocabulary; or (b) min_p drops
        every token outside anyway (the best allowed one is more than the min_p gap
        above them), which leaves only top_p's normalisation changed, by tokens at
        least e^-13 times less likely than the best allowed one."""
        top = float(biased.max())
        for margin in _MARGINS if np.isfinite(top) else ():
            best = np.flatnonzero(biased >= top - margin)
            few = Candidates(ids[best], biased[best])
            few.apply(self.grammar)
            allowed = few.view["logit"][np.isfinite(few.view["logit"])]
            enough = self.need is not None and allowed.size >= self.need
            gap = self.min_p_gap
            dropped = gap is not None and allowed.size and allowed.max() - gap >= top - margin
            if enough or dropped:
                few.apply(self.post)
                return few.selected()
        assert self._full is not None
        cand = self._full
        cand.refill(ids, biased)
        cand.apply(self.grammar)
        if cand.num_allowed() == 0:
            return None
        cand.apply(self.post)
        return cand.selected()

    def accept(self, token: int) -> bool:
        """Take `token` as if drawn (False, taking nothing: the grammar refuses it)."""
        if self.grammar is not None:
            if not self._allows(token):
                return False
            C.llama_sampler_accept(self.grammar, token)
        C.llama_sampler_accept(self.ptr, token)
        if self._best is not None:
            self._best.note(token)
        return True

    def close(self) -> None:
        if self.ptr:
            C.llama_sampler_free(self.ptr)  # frees `pre` and `post` with it
            self.ptr = None
        if self.grammar:
            C.llama_sampler_free(self.grammar)
            self.grammar = None
