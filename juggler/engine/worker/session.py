"""A session's state inside its worker: sequence id, tokens, pending input, generation.

Owned by one worker thread (its `SessionTable`); nothing else reads or writes it.

Lifecycle (`SessionState`):

    IDLE --generate--> GENERATING --done/cancel/error--> IDLE         (API sessions)
    GENERATING --done--> CACHED  (ephemeral sessions of stateless requests: KV kept)
    CACHED --a request reuses its prefix--> GENERATING
    IDLE --end--> CLOSED ;  CACHED --evicted--> CLOSED

Parking (issue 10: idle sessions must never starve stateless requests of sequences): an
IDLE API session may lose its sequence (`seq_id == NO_SEQ`) while keeping its KV in host
memory (`parked_kv`, a copy of the sequence's state); `tokens` then is what that copy
holds. Its next /input or /generate takes a sequence again and copies the KV back in (or,
if that cannot be done, decodes `tokens` again): the conversation is never lost.

KV discipline: `tokens` is exactly what the sequence holds in the KV cache, at positions
0..n_past-1; the next token always goes in at `pos = n_past`. `pending` is input (or the
last sampled token) not yet decoded. A sampled token enters `pending` and is decoded on
the next tick, so after a cancel or a length stop the conversation continues seamlessly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from juggler.engine.llama.chat import ChatState
from juggler.engine.llama.ports import Logits, TokenSampler
from juggler.engine.llama.sampling import SamplingParams, StopMatcher, Utf8Assembler
from juggler.engine.schedule.messages import AdapterRef
from juggler.engine.schedule.stream import StreamSink

if TYPE_CHECKING:
    from juggler.engine.worker.speculation import Speculation

#: `Session.seq_id` of a parked session: it holds no sequence of the KV cache.
NO_SEQ = -1


class SessionState(enum.Enum):
    IDLE = "idle"
    GENERATING = "generating"
    CACHED = "cached"
    CLOSED = "closed"


@dataclass(eq=False)
class Generation:
    """One running generation: budget, sampler chain, text assembly and its stream."""

    params: SamplingParams
    sink: StreamSink
    sampler: TokenSampler
    max_new_tokens: int
    t_arrival: float
    prompt_tokens: int
    stop: StopMatcher
    #: A chat session continuing its last (cancelled or cut) assistant reply.
    continues_reply: bool = False
    utf8: Utf8Assembler = field(default_factory=Utf8Assembler)
    num_generated: int = 0
    t_first: float = 0.0
    t_last: float = 0.0
    token_times: list[float] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    #: The raw text of every token that stays in the sequence (stop strings included).
    raw_parts: list[str] = field(default_factory=list)
    #: Prompt-lookup speculative decoding (None: off for this generation).
    spec: Speculation | None = None
    #: A greedy generation the worker remembers (`schedule.recall`): each sampled
    #: token's tie (`schedule.ties`), in order; None: not recorded.
    ties: list[int] | None = None


@dataclass(eq=False)
class Session:
    session_id: str
    seq_id: int
    is_ephemeral: bool = False
    state: SessionState = SessionState.IDLE
    tokens: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    chat: ChatState | None = None
    generation: Generation | None = None
    last_used: int = 0
    #: Prompt tokens decoded since the last generation finished (input prefill).
    num_prefilled: int = 0
    #: Prompt tokens found already in KV when this request started (stateless reuse).
    num_reused: int = 0
    #: Chat sessions: the assistant header appended on speculation after a user turn
    #: (its text and token count), so /input prefills it and /generate starts at once.
    spec_header: tuple[str, int] | None = None
    #: The logits after the last decoded token, when a speculative prefill ended there.
    saved_logits: Logits | None = None
    #: A parked session's KV, copied out of its former sequence (None: nothing to copy).
    parked_kv: Any = None
    #: The LoRA adapter every decode of this session runs with (seed 004).
    adapter: AdapterRef | None = None
    #: How many of the last pending tokens are speculative drafts (see `speculation`).
    num_draft: int = 0

    @property
    def adapter_id(self) -> str | None:
        return self.adapter.adapter_id if self.adapter is not None else None

    @property
    def has_seq(self) -> bool:
        """It holds a sequence of the KV cache (is not parked)."""
        return self.seq_id != NO_SEQ

    @property
    def needs_logits(self) -> bool:
        """Its last pending token's logits are wanted: a generation samples from them,
        or a speculative header keeps them for the generate to come."""
        return self.generation is not None or self.spec_header is not None

    @property
    def n_past(self) -> int:
        return len(self.tokens)
