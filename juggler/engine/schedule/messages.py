"""Typed commands between the HTTP routes, the master task and the worker threads.

One frozen dataclass per kind; `Command` is their union, and each receiver dispatches on
it in one place (a `match`) that logs the kinds it does not know. Nothing changes a
command once it is sent: the engine (`runtime`) creates its reply future and its session
or request id before it goes on the master's ingress queue.

    routes --RouteCommand--> master ingress queue --WorkerCommand--> worker inbox
    worker --Notice (SessionGone, RequestDone, WorkerDied)--> master ingress queue

The receiver answers by resolving the command's `reply` future (a worker through its
`Outbox`, which also carries its stream events and its notices to the master).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.stream import RequestStats, StreamSink
from juggler.errors import EngineDead

#: The answer of a session command: a small JSON object for the route.
Reply = asyncio.Future[dict[str, Any]]
#: One chat message as a template reads it: {"role": ..., "content": ...}.
Message = dict[str, Any]


@dataclass(frozen=True)
class AdapterRef:
    """The LoRA adapter a request runs with (seed 004): the id clients use as the model
    name, and the adapter's GGUF file, which the router has checked."""

    adapter_id: str
    path: str


# -- session API (routed to the session's worker) ------------------------------------------
@dataclass(frozen=True, eq=False)
class CreateSession:
    session_id: str
    reply: Reply
    #: Every turn of the session runs with this adapter (its KV was made with it).
    adapter: AdapterRef | None = None


@dataclass(frozen=True, eq=False)
class AppendInput:
    """A delta: exactly one of a text or chat messages."""

    session_id: str
    reply: Reply
    text: str | None = None
    messages: tuple[Message, ...] | None = None
    #: Tools for a template that renders them itself (from now on; None: unchanged).
    tools: tuple[dict[str, Any], ...] | None = None
    #: What follows the generation prompt from now on (None: unchanged).
    header_suffix: str | None = None


@dataclass(frozen=True, eq=False)
class Generate:
    session_id: str
    reply: Reply
    params: SamplingParams
    sink: StreamSink
    t_arrival: float


@dataclass(frozen=True, eq=False)
class Cancel:
    session_id: str
    reply: Reply


@dataclass(frozen=True, eq=False)
class EndSession:
    session_id: str
    reply: Reply


# -- stateless requests (placed by the master) ----------------------------------------------
@dataclass(frozen=True, eq=False)
class Complete:
    """A stateless completion: an ephemeral session that may reuse cached KV."""

    request_id: str
    reply: Reply
    prompt: tuple[int, ...]
    params: SamplingParams
    sink: StreamSink
    t_arrival: float
    #: The prompt's prefix-block hashes, for the master's worker affinity (prefix_cache).
    prefix_keys: tuple[int, ...] = ()
    adapter: AdapterRef | None = None


@dataclass(eq=False)
class Abandon:
    """Set on the event loop when the caller of an embedding or rerank left; the worker
    reads it between pieces and drops the request (one writer, one reader, a bool)."""

    is_set: bool = False

    def set(self) -> None:
        self.is_set = True


@dataclass(frozen=True, eq=False)
class Embed:
    """Token lists, one per input (one sequence each); answers one vector per input."""

    request_id: str
    reply: asyncio.Future[list[list[float]]]
    inputs: tuple[tuple[int, ...], ...]
    abandon: Abandon = field(default_factory=Abandon)


@dataclass(frozen=True, eq=False)
class Rerank:
    """Query-document token lists; answers one score (a 1-vector) per input."""

    request_id: str
    reply: asyncio.Future[list[list[float]]]
    inputs: tuple[tuple[int, ...], ...]
    abandon: Abandon = field(default_factory=Abandon)


@dataclass(frozen=True, eq=False)
class Downsize:
    """Seed 002's soft idle, for one worker: park every session and cached prefix in host
    memory, then free the llama.cpp context. Answers what it freed (or why it did not)."""

    worker_id: int
    reply: Reply


@dataclass(frozen=True, eq=False)
class DropAdapter:
    """Unload a LoRA adapter from one worker (it was unregistered). Answers whether it was
    loaded; refused with Conflict while a request of the worker runs with it."""

    worker_id: int
    adapter_id: str
    reply: Reply


@dataclass(frozen=True, eq=False)
class EraseSlot:
    """llama.cpp's `POST /slots/{id}?action=erase` for one worker's sequence `seq_id`:
    forget the prefix it caches. Answers `{"n_erased": tokens}`; refused with Conflict
    while it runs a request or holds a client's session."""

    worker_id: int
    seq_id: int
    reply: Reply


# -- notices from workers to the master -----------------------------------------------------
@dataclass(frozen=True, eq=False)
class SessionGone:
    """The session's sequence is released (or was never created)."""

    session_id: str
    worker_id: int


@dataclass(frozen=True, eq=False)
class RequestDone:
    """A stateless request or a generation finished; carries its stats if it ran."""

    request_id: str
    worker_id: int
    stats: RequestStats | None = None


@dataclass(frozen=True, eq=False)
class WorkerDied:
    """A worker's thread failed; it has ended its requests with `error`."""

    worker_id: int
    error: EngineDead


@dataclass(frozen=True, eq=False)
class Shutdown:
    """Stop the receiver (the master task or a worker thread)."""


@dataclass(frozen=True, eq=False)
class Recheck:
    """Wakes an idle worker to look again at what it holds: another worker decodes and
    this one's idle OpenMP pool holds it back (`ThreadGovernor`)."""


SessionCommand = AppendInput | Generate | Cancel | EndSession
StatelessCommand = Complete | Embed | Rerank
RouteCommand = (
    CreateSession | SessionCommand | StatelessCommand | Downsize | DropAdapter | EraseSlot
)
#: What a worker's inbox receives.
WorkerCommand = RouteCommand | Shutdown | Recheck
Notice = SessionGone | RequestDone | WorkerDied
Command = RouteCommand | Notice | Shutdown | Recheck


def reply_of(cmd: Command) -> asyncio.Future[Any] | None:
    """The command's reply future, if its sender waits for one."""
    reply: asyncio.Future[Any] | None = getattr(cmd, "reply", None)
    return reply
