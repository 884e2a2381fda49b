"""Sampling parameters and the text side of generation: UTF-8 assembly, stop strings
and log-probabilities.

The per-generation `llama_sampler` chains themselves are `native_sampler.Sampler` (logit
bias, penalties, top_k, top_p, min_p, temperature, then a seeded draw, or greedy at
temperature 0; a grammar, when given, constrains the draw). This module is pure: it runs
on the worker thread but touches no llama.cpp state, so the tests call it directly.
"""

from __future__ import annotations

import codecs
import random
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """What one generation asks for; defaults follow llama.cpp's server."""

    max_new_tokens: int = 256
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    stop: tuple[str, ...] = ()
    #: llama.cpp server's extension: never sample an end-of-generation token.
    ignore_eos: bool = False
    #: A GBNF grammar the generated text must match (response_format, tools, `grammar`).
    grammar: str | None = None
    #: OpenAI's logit_bias: (token, bias) pairs added to the logits before sampling.
    logit_bias: tuple[tuple[int, float], ...] = ()
    #: None: no log-probabilities; k >= 0: each token's and its k most likely rivals'.
    top_logprobs: int | None = None
    #: Prompt-lookup speculative decoding for this request; None: the engine's default.
    speculative: bool | None = None
    #: A thinking budget: at most this many tokens of thinking (-1: none), in the form
    #: `thinking.budget.FORMS` names ("think", "inside", "harmony").
    think_budget: int = -1
    think_form: str = ""

    def resolved_seed(self) -> int:
        return self.seed if self.seed is not None else random.getrandbits(32)


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability under the model, and the `top` most likely
    tokens at that step (token, logprob), most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: Any, token: int, k: int) -> TokenLogprob:
    """The log-softmax of one row of raw logits at `token`, with the `k` best tokens.

    OpenAI's logprobs are the model's own distribution: taken before penalties, bias,
    temperature or a grammar change the logits."""
    x = np.asarray(logits, dtype=np.float64)
    top = float(x.max())
    lse = top + float(np.log(np.exp(x - top).sum()))
    best: tuple[tuple[int, float], ...] = ()
    if k > 0:
        k = min(k, x.shape[0])
        idx = np.argpartition(-x, k - 1)[:k]
        idx = idx[np.argsort(-x[idx], kind="stable")]
        best = tuple((int(i), float(x[i]) - lse) for i in idx)
    return TokenLogprob(token, float(x[token]) - lse, best)


class Utf8Assembler:
    """Turns token byte pieces into text without splitting multi-byte characters.

    Bytes that can never be UTF-8 become U+FFFD as they come. The start of a character
    that the generation ended before completing (`max_tokens` cut it in half) is held
    back and dropped at `flush`: what a client receives is whole characters, never a
    U+FFFD that stands for half of one (issue 52)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        """The end of the text: "" (an incomplete last character is dropped)."""
        self._decoder.reset()
        return ""


class StopMatcher:
    """Finds stop strings in streamed text, holding back text that may start one.

    `feed(text)` returns `(emit, stopped)`: `emit` is text that can safely be sent now;
    when `stopped` is True the output ends before the stop string (which is not sent).
    `flush()` returns whatever is still held back when generation ends for another reason.
    `matched` is the stop string that ended the output (the first listed of those found
    at the earliest place), once one has.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.is_matched = False
        self.matched: str | None = None

    def feed(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        buf = self._held + text
        first = -1
        for stop in self._stops:
            at = buf.find(stop)
            if at != -1 and (first == -1 or at < first):
                first, self.matched = at, stop
        if first != -1:
            self._held = ""
            self.is_matched = True
            return buf[:first], True
        keep = 0
        for stop in self._stops:
            # The longest suffix of buf that is a proper prefix of this stop string.
            for n in range(min(len(stop) - 1, len(buf)), 0, -1):
                if buf.endswith(stop[:n]):
                    keep = max(keep, n)
                    break
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out
