"""A tiny deterministic stand-in for llama.cpp, used only by the engine's unit tests
(`rig.Rig` runs a generation worker on it).

It implements `juggler.engine.llama.ports`:

- Vocabulary: bytes. Token t < 256 is the byte t; BOS = 256 and EOS = 257 (the only
  end-of-generation token). "ab" tokenizes to [BOS, 97, 98] with add_special.
- Context: KV cells per sequence ({pos: token}). `decode` writes a batch only if every
  row continues its sequence (rc -1 otherwise, like llama.cpp's inconsistent positions)
  and the free cells hold it (rc 1, nothing written). For each row that asks for logits
  it computes the next token from the cells the sequence holds: `next_token()`.
- Greedy rule: after "!" comes EOS, else the letter 'a' + (last + length) % 26. So the
  output depends on exactly what the sequence holds: a wrong position, a lost or
  repeated token or another sequence's cell all change it. `greedy()` predicts it.
- LoRA: `load_adapter("shift:K")` is an adapter that adds K to the greedy rule's sum
  (any other path is refused with BadRequest); `decoded_adapters` records the adapter
  each decode ran with, so tests see which sequences shared a decode.
- Faults: `fail_decodes` {decode number: rc} (after writing `partial` rows),
  `raise_on_decode` (that decode raises), `no_partial_rm` (seq_rm of a tail fails, as in
  sliding-window caches), `fail_restores` (restore_seq_state fails).
- `FakeLlama(copying=True)` uses `copy_token` instead: the output repeats what the
  sequence holds (the workload speculative decoding is for).
- Sampling: greedy plus `logit_bias`; logits are one-hot (1.0 at the greedy token).
  With `FakeLlama(stochastic=True)`, above temperature 0 a seeded draw keeps the greedy
  letter three times in four and takes the next letter otherwise (output differs by seed).
"""

from __future__ import annotations

import array
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from juggler.engine.llama.ports import ContextParams, LlamaContext, TokenBatch
from juggler.engine.llama.sampling import SamplingParams
from juggler.errors import BadRequest

BOS = 256
EOS = 257
N_VOCAB = 258


def next_token(seq: Sequence[int], shift: int = 0) -> int:
    last = seq[-1]
    if last == ord("!"):
        return EOS
    return ord("a") + (last + len(seq) + shift) % 26


def copy_token(seq: Sequence[int], shift: int = 0) -> int:
    """The copying rule (`FakeLlama(copying=True)`): the token that followed the most recent
    earlier occurrence of the last token, else `next_token` (so "!" still ends). Its output repeats what the
    sequence holds, as text quoting its prompt does: what speculative drafts are for."""
    last = seq[-1]
    if last == ord("!"):
        return EOS
    for i in range(len(seq) - 2, -1, -1):
        if seq[i] == last:
            return seq[i + 1]
    return next_token(seq, shift)


def greedy(seq: Sequence[int], n: int, shift: int = 0) -> list[int]:
    """The tokens a greedy generation of at most `n` produces after `seq` (with an
    adapter of `shift`)."""
    seq = list(seq)
    out: list[int] = []
    while len(out) < n:
        t = next_token(seq, shift)
        if t == EOS:
            break
        out.append(t)
        seq.append(t)
    return out


def text_of(tokens: Sequence[int]) -> str:
    return bytes(t for t in tokens if t < 256).decode()


@dataclass
class Row:
    token: int
    pos: int
    seq_id: int
    logits: bool


class FakeBatch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rows: list[Row] = []
        self.closed = False

    @property
    def n_tokens(self) -> int:
        return len(self.rows)

    def clear(self) -> None:
        self.rows = []

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        assert len(self.rows) < self.capacity, "batch overflow"
        self.rows.append(Row(token, pos, seq_id, logits))
        return len(self.rows) - 1

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class FakeAdapter:
    path: str
    shift: int


@dataclass
class Faults:
    fail_decodes: dict[int, int] = field(default_factory=dict)
    #: Rows a failing decode writes before it fails (part of the batch reached the KV).
    partial: int = 0
    raise_on_decode: int | None = None
    no_partial_rm: bool = False
    fail_restores: bool = False
    #: While set, every decode waits for it to be cleared (a wedged llama.cpp call).
    wedge: threading.Event | None = None


class FakeContext:
    def __init__(
        self, params: ContextParams, faults: Faults, rule: Callable[..., int] = next_token
    ) -> None:
        self.rule = rule
        self.n_ctx = params.n_ctx
        self.n_seq_max = params.n_seq_max
        self.faults = faults
        self.cells: dict[int, dict[int, int]] = {}
        self.num_removals = 0
        self.num_copies = 0
        self.num_decodes = 0
        #: Every decoded batch, as its rows, and the adapter it ran with.
        self.decoded: list[list[Row]] = []
        self.decoded_adapters: list[FakeAdapter | None] = []
        self.adapter: FakeAdapter | None = None
        self._next: dict[int, int] = {}
        #: How far the greedy token's logit leads the others', by the sequence so far
        #: (a near-tie where small: see `schedule.ties`).
        self.lead: Callable[[list[int]], float] = lambda tokens: 1.0
        self._lead: dict[int, float] = {}
        self.closed = False
        self.n_threads = params.n_threads
        #: The thread count of every decode, in order.
        self.decoded_threads: list[int] = []

    # -- for the tests ---------------------------------------------------------------
    def tokens(self, seq_id: int) -> list[int]:
        """What the sequence holds, in position order."""
        cells = self.cells.get(seq_id, {})
        return [cells[p] for p in sorted(cells)]

    def used(self) -> int:
        return sum(len(c) for c in self.cells.values())

    # -- the port --------------------------------------------------------------------
    def decode(self, batch: TokenBatch) -> int:
        assert isinstance(batch, FakeBatch)
        self.num_decodes += 1
        n = self.num_decodes
        while self.faults.wedge is not None and self.faults.wedge.is_set():
            time.sleep(0.005)
        if self.faults.raise_on_decode == n:
            raise RuntimeError(f"fake decode {n} exploded")
        rows = list(batch.rows)
        self.decoded.append(rows)
        self.decoded_threads.append(self.n_threads)
        self.decoded_adapters.append(self.adapter)
        self._next = {}
        rc = self.faults.fail_decodes.get(n)
        if rc is not None:
            for r in rows[: self.faults.partial]:
                self.cells.setdefault(r.seq_id, {})[r.pos] = r.token
            return rc
        ends = {s: (max(c) + 1 if c else 0) for s, c in self.cells.items()}
        for r in rows:
            if r.pos != ends.get(r.seq_id, 0):
                return -1
            ends[r.seq_id] = r.pos + 1
        if self.used() + len(rows) > self.n_ctx:
            return 1
        for r in rows:
            self.cells.setdefault(r.seq_id, {})[r.pos] = r.token
        for i, r in enumerate(rows):
            if r.logits:
                shift = self.adapter.shift if self.adapter else 0
                held = self.tokens(r.seq_id)[: r.pos + 1]
                self._next[i] = self.rule(held, shift)
                self._lead[i] = self.lead(held)
        return 0

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        self.num_removals += 1
        lo = max(p0, 0)
        hi = p1 if p1 >= 0 else 1 << 62
        if self.faults.no_partial_rm and lo > 0:
            return False
        cells = self.cells.get(seq_id, {})
        for p in [p for p in cells if lo <= p < hi]:
            del cells[p]
        return True

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self.num_copies += 1
        lo, hi = max(p0, 0), (p1 if p1 >= 0 else 1 << 62)
        into = self.cells.setdefault(dst, {})
        for p, t in self.cells.get(src, {}).items():
            if lo <= p < hi:
                into[p] = t

    def seq_state(self, seq_id: int) -> Any | None:
        tokens = self.tokens(seq_id)
        return array.array("q", tokens) if tokens else None  # a buffer, like llama.cpp's

    def restore_seq_state(self, seq_id: int, state: Any) -> bool:
        if isinstance(state, bytes):  # read back from disk (cache.spill)
            state = array.array("q", state)
        if self.faults.fail_restores or self.used() + len(state) > self.n_ctx:
            return False
        assert not self.cells.get(seq_id), "restoring into a sequence that holds cells"
        self.cells[seq_id] = dict(enumerate(state))
        return True

    def logits_row(self, row: int) -> Any:
        assert row in self._next, f"batch row {row} has no logits"
        out = [0.0] * N_VOCAB
        out[self._next[row]] = self._lead.get(row, 1.0)
        return tuple(out)

    def set_threads(self, n: int) -> None:
        self.n_threads = n

    def set_adapter(self, adapter: Any | None) -> None:
        self.adapter = adapter

    def close(self) -> None:
        self.closed = True


class FakeSampler:
    """Greedy over the logits plus `logit_bias`: the most likely token that is not
    banned (ties: the lowest id). Grammars are not applied (see the real sampler). With a
    `script`, it samples the script's bytes instead, then EOS."""

    def __init__(
        self,
        ctx: FakeContext,
        params: SamplingParams,
        banned: Sequence[int],
        script: bytes | None = None,
        *,
        stochastic: bool = False,
    ) -> None:
        self.ctx = ctx
        self.params = params
        self.banned = set(banned)
        self.bias = dict(params.logit_bias)
        self.script = list(script) if script is not None else None
        self.rng = random.Random(params.seed) if stochastic and params.temperature > 0 else None
        self.closed = False

    def sample(self, row: int) -> int:
        return self.sample_logits(self.ctx.logits_row(row))

    def lead(self, row: int, token: int) -> float:
        logits = self.ctx.logits_row(row)
        return float(logits[token] - max(v for i, v in enumerate(logits) if i != token))

    def sample_logits(self, logits: Any) -> int:
        if self.script is not None:
            return self.script.pop(0) if self.script else EOS
        best = -max(
            (v + self.bias.get(i, 0.0), -i) for i, v in enumerate(logits) if i not in self.banned
        )[1]
        if self.rng is None or best >= 256 or best < ord("a") or best > ord("z"):
            return best
        # Above temperature 0: the best letter three times in four, else the next letter.
        return best if self.rng.random() < 0.75 else ord("a") + (best - ord("a") + 1) % 26

    def close(self) -> None:
        self.closed = True


class FakeLlama:
    """The loaded model (`ports.LlamaModel`); `ctx` is the last context it made."""

    n_vocab = N_VOCAB
    add_bos = True
    bos = BOS
    eos = EOS
    architecture = "fake"

    def __init__(
        self,
        faults: Faults | None = None,
        script: bytes | None = None,
        *,
        copying: bool = False,
        stochastic: bool = False,
    ) -> None:
        self.faults = faults or Faults()
        self.stochastic = stochastic
        self.rule = copy_token if copying else next_token
        #: What every sampler writes instead of the greedy output (see FakeSampler).
        self.script = script
        self.contexts: list[FakeContext] = []
        self.samplers: list[FakeSampler] = []
        #: Adapters loaded and not freed, and how many loads ran.
        self.adapters: list[FakeAdapter] = []
        self.num_adapter_loads = 0

    @property
    def ctx(self) -> FakeContext:
        return self.contexts[-1]

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        return ([BOS] if add_special else []) + list(text.encode())

    def piece(self, token: int) -> bytes:
        return bytes([token]) if token < 256 else b""

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def eog_tokens(self) -> tuple[int, ...]:
        return (EOS,)

    def special_text(self, token: int) -> str:
        return {BOS: "<s>", EOS: "</s>"}.get(token, "")

    def chat_template(self, name: str | None = None) -> str | None:
        return None

    def check_grammar(self, grammar: str) -> None:
        """Only checks that there is a root rule (llama.cpp parses for real)."""
        if "root ::=" not in grammar:
            raise BadRequest("grammar: no root rule", param="grammar")

    def new_context(self, params: ContextParams) -> FakeContext:
        ctx = FakeContext(params, self.faults, self.rule)
        self.contexts.append(ctx)
        return ctx

    def new_batch(self, capacity: int) -> FakeBatch:
        return FakeBatch(capacity)

    def new_sampler(
        self, ctx: LlamaContext, params: SamplingParams, *, banned: Sequence[int] = ()
    ) -> FakeSampler:
        assert isinstance(ctx, FakeContext)
        sampler = FakeSampler(ctx, params, banned, self.script, stochastic=self.stochastic)
        self.samplers.append(sampler)
        return sampler

    def load_adapter(self, path: str) -> FakeAdapter:
        kind, _, shift = path.partition(":")
        if kind != "shift" or not shift.isdigit():
            raise BadRequest(f"{path} is not a LoRA adapter for this model", param="lora_path")
        adapter = FakeAdapter(path, int(shift))
        self.adapters.append(adapter)
        self.num_adapter_loads += 1
        return adapter

    def free_adapter(self, adapter: Any) -> None:
        self.adapters.remove(adapter)
