"""Typed commands between the HTTP routes, the master task and the worker threads.

Every command carries an Enum tag and, when the sender waits for an answer, an asyncio
future that the receiver resolves (a worker through its `Outbox`, which also carries
its stream events and its notices to the master).

    routes --Command--> master ingress queue --Command--> worker inbox (thread-safe)
    worker --SESSION_GONE / REQUEST_DONE--> master ingress queue
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.stream import RequestStats, StreamSink


class CommandKind(enum.Enum):
    CREATE_SESSION = "create_session"
    APPEND_INPUT = "append_input"
    GENERATE = "generate"
    CANCEL = "cancel"
    END_SESSION = "end_session"
    #: A stateless completion: an ephemeral session that may reuse cached KV.
    COMPLETE = "complete"
    EMBED = "embed"
    RERANK = "rerank"
    #: worker -> master: the session's sequence is released (or was never created).
    SESSION_GONE = "session_gone"
    #: worker -> master: a generation finished; carries its stats.
    REQUEST_DONE = "request_done"
    SHUTDOWN = "shutdown"


@dataclass(eq=False)
class Command:
    kind: CommandKind
    reply: asyncio.Future[Any] | None = None
    session_id: str | None = None
    #: APPEND_INPUT: a text delta, or a chat-message delta.
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    #: COMPLETE: the tokenized prompt and its affinity hashes (see prefix_cache).
    prompt: tuple[int, ...] = ()
    prefix_keys: tuple[int, ...] = ()
    params: SamplingParams | None = None
    sink: StreamSink | None = None
    t_arrival: float = 0.0
    #: EMBED / RERANK: token lists, one per input (one sequence each).
    inputs: list[list[int]] = field(default_factory=list)
    #: Notices from workers.
    worker_id: int = -1
    stats: RequestStats | None = None
