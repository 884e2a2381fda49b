"""The bridge from a worker thread to one request's asyncio consumer.

A worker pushes `StreamEvent`s with `StreamSink.push()`; the consumer on the event loop
takes them in batches (`take`), woken through the worker's `Outbox` (one loop wake-up per
tick for all of the worker's streams, one consumer wake-up per batch), so the worker
never blocks on a consumer. The bound
is counted rather than enforced by the queue: the worker counts what it sent, the
consumer counts what it took (each counter has one writer), and when more than
`max_pending` events are unconsumed the worker ends the stream with an error event.
Cancellation goes the other way: the consumer sets `is_cancelled`; the worker checks it
once per tick and finishes the generation with finish_reason "cancelled".

A non-incremental sink (a non-streaming request) sends nothing until the end: its
final event carries the whole text (and token ids and logprobs), so the loop is not woken for every token of an
answer nobody reads before it is complete.
"""

from __future__ import annotations

import asyncio
import collections
import enum
from dataclasses import dataclass, field, replace
from typing import Any

from juggler.engine.llama.sampling import TokenLogprob
from juggler.engine.schedule.outbox import Outbox
from juggler.errors import JugglerError


class EventKind(enum.Enum):
    TOKEN = "token"
    DONE = "done"
    ERROR = "error"


@dataclass(frozen=True)
class RequestStats:
    """What one finished generation did; the backend's /stats shows the latest."""

    input_tokens: int = 0
    output_tokens: int = 0
    prompt_tokens_prefilled: int = 0
    prompt_tokens_reused: int = 0
    time_to_first_token: float = 0.0
    tokens_per_second: float = 0.0
    decode_token_count: int = 0
    decode_token_times: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "time_to_first_token": self.time_to_first_token,
            "tokens_per_second": self.tokens_per_second,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.input_tokens,
            "prompt_tokens_prefilled": self.prompt_tokens_prefilled,
            "prompt_tokens_reused": self.prompt_tokens_reused,
            "decode_token_count": self.decode_token_count,
            "decode_token_times": list(self.decode_token_times),
        }


@dataclass(frozen=True)
class StreamEvent:
    kind: EventKind
    text: str = ""
    token_ids: tuple[int, ...] = ()
    #: The tokens' log-probabilities, when the request asked for them.
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: str | None = None
    #: The stop string that ended the generation (a DONE event's), if one did.
    stop_sequence: str | None = None
    stats: RequestStats | None = None
    error: JugglerError | None = None


@dataclass(eq=False)
class StreamSink:
    """One request's event stream. `push`/`finish` run on the worker thread that serves
    it (`bind()` gives it that worker's outbox first); `take`, `get`, `cancel` run on the
    event loop.

    Delivery (issue 47): events wait in a deque that only the worker appends to and only
    the consumer pops from (both atomic under the GIL). The worker asks the loop to wake
    the consumer once per batch (`_armed` is set until that wake-up has run), not once
    per event, and the consumer takes every event that is there at once (`take`), so a
    consumer that fell behind catches up in one step. A wake-up that finds the events
    already taken is harmless; an event is never left without one on its way."""

    max_pending: int = 256
    #: False: hold token text back and send it with the final event.
    incremental: bool = True
    num_sent: int = 0
    num_taken: int = 0
    is_cancelled: bool = False
    is_finished: bool = False
    outbox: Outbox | None = None
    _events: collections.deque[StreamEvent] = field(default_factory=collections.deque)
    _armed: bool = False
    _waiter: asyncio.Future[None] | None = None
    #: What a non-incremental sink holds back until its final event.
    _held_text: list[str] = field(default_factory=list)
    _held_tokens: list[int] = field(default_factory=list)
    _held_logprobs: list[TokenLogprob] = field(default_factory=list)

    # -- worker thread ---------------------------------------------------------------
    def bind(self, outbox: Outbox) -> None:
        """Deliver through the serving worker's outbox from now on."""
        self.outbox = outbox

    def _post(self, event: StreamEvent) -> None:
        assert self.outbox is not None, "bind() the sink to its worker first"
        self.num_sent += 1
        self._events.append(event)
        if not self._armed:
            self._armed = True
            self.outbox.call(self._wake)

    def push(self, event: StreamEvent) -> bool:
        """Queue a token event; False (nothing queued) when the consumer is too far behind."""
        if not self.incremental:
            self._hold(event.text, event.token_ids, event.logprobs)
            return True
        if self.num_sent - self.num_taken >= self.max_pending:
            return False
        self._post(event)
        return True

    def push_token(self, text: str, token: int, logprob: TokenLogprob | None = None) -> bool:
        """`push` of one token's event; a sink that holds its text back makes none (a
        lone stream's host time per token, issue 23)."""
        if not self.incremental:
            self._held_text.append(text)
            self._held_tokens.append(token)
            if logprob is not None:
                self._held_logprobs.append(logprob)
            return True
        if self.num_sent - self.num_taken >= self.max_pending:
            return False
        lps = (logprob,) if logprob is not None else ()
        self._post(StreamEvent(EventKind.TOKEN, text, (token,), lps))
        return True

    def _hold(self, text: str, tokens: tuple[int, ...], logprobs: tuple[TokenLogprob, ...]) -> None:
        self._held_text.append(text)
        self._held_tokens.extend(tokens)
        self._held_logprobs.extend(logprobs)

    def finish(self, event: StreamEvent) -> None:
        """Queue the final DONE or ERROR event (always accepted) and close the sink."""
        if self.is_finished:
            return
        self.is_finished = True
        if self._held_text:
            self._hold(event.text, event.token_ids, event.logprobs)
            event = replace(
                event,
                text="".join(self._held_text),
                token_ids=tuple(self._held_tokens),
                logprobs=tuple(self._held_logprobs),
            )
            self._held_text.clear()
            self._held_tokens.clear()
            self._held_logprobs.clear()
        self._post(event)

    # -- event loop ------------------------------------------------------------------
    def _wake(self) -> None:
        self._armed = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def taken(self) -> list[StreamEvent]:
        """Every event that arrived, without waiting (none: [])."""
        events = self._events
        n = len(events)
        out = [events.popleft() for _ in range(n)]
        self.num_taken += n
        return out

    async def take(self) -> list[StreamEvent]:
        """Every event that arrived, waiting for at least one; the last one taken is
        the final event once the stream ended."""
        while not self._events:
            await self._wait()
        return self.taken()

    async def get(self) -> StreamEvent:
        """The next event, one at a time (tests, and consumers of one event)."""
        while not self._events:
            await self._wait()
        self.num_taken += 1
        return self._events.popleft()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def cancel(self) -> None:
        self.is_cancelled = True
