"""The backend's stored responses (the Responses API) and the sessions that hold their
conversations' KV.

Each stored response remembers its conversation (the turns as chat messages, without
instructions), what set the prompt up (instructions and tools: `setup`), and the engine
session whose KV holds the conversation up to and including this response, if this
response is still that session's *head* (its latest turn). Continuing from a head
(`previous_response_id`) appends only the new input to that session: the conversation
is never prefilled again. Continuing from anything else (an older response, another
setup, a session that is gone) starts a new session with the whole conversation.

A head is *claimed* by the request that continues it, so two requests never append to
one session; a session nobody heads any more is ended. At most `capacity` responses are
kept (the oldest go first, and their sessions with them).

The heads' sessions are a cache the client never asked to hold, and their KV cells are
the ones every other request needs too: together they hold at most `cell_budget` cells
(half the context by default). Past it, the oldest heads' sessions are ended; their
responses stay, and continuing one prefills its conversation anew. Without that bound,
clients that store every response but never continue one (the OpenAI Agents SDK's
default) would fill the KV cache until every request is refused.

Owned by the event loop of the backend's HTTP app; nothing else touches it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from juggler.api.openai import ChatMessage
from juggler.errors import JugglerError, ResponseNotFound

log = logging.getLogger(__name__)

#: Responses a backend keeps for retrieval and continuation.
MAX_STORED = 512


@dataclass
class StoredResponse:
    id: str
    body: dict[str, Any]
    #: The conversation's turns up to and including this response's output.
    turns: list[ChatMessage]
    #: Instructions and tools, as one comparable string.
    setup: str
    #: The session holding this conversation's KV, while this response heads it.
    session_id: str | None = None
    #: The KV cells that session holds (the conversation's tokens).
    cells: int = 0


@dataclass
class ResponseStore:
    end_session: Callable[[str], Awaitable[Any]]
    capacity: int = MAX_STORED
    #: Most KV cells the heads' sessions hold together (None: no bound).
    cell_budget: int | None = None
    _items: collections.OrderedDict[str, StoredResponse] = field(
        default_factory=collections.OrderedDict
    )
    #: session id -> the response that heads it.
    _heads: dict[str, str] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        found = self._items.get(response_id)
        if found is None:
            raise ResponseNotFound(f"no response with id {response_id!r}", param=param)
        return found

    def claim(self, prev: StoredResponse, setup: str) -> str | None:
        """The session to continue `prev` on, taken from the store (None: start anew)."""
        sid = prev.session_id
        if sid is None or self._heads.get(sid) != prev.id or prev.setup != setup:
            return None
        del self._heads[sid]
        prev.session_id = None
        return sid

    def put(self, response: StoredResponse) -> None:
        """Keep a finished response; it heads its session."""
        self._items[response.id] = response
        if response.session_id is not None:
            self._heads[response.session_id] = response.id
        while len(self._items) > self.capacity:
            _, old = self._items.popitem(last=False)
            self._release(old)
        self._within_budget()

    def _within_budget(self) -> None:
        """End the oldest heads' sessions until the heads hold at most `cell_budget`."""
        if self.cell_budget is None:
            return
        held = self.held_cells()
        for item in list(self._items.values()):  # oldest first
            if held <= self.cell_budget:
                return
            if item.session_id is not None and self._heads.get(item.session_id) == item.id:
                held -= item.cells
                self._release(item)
                item.session_id = None

    def held_cells(self) -> int:
        """The KV cells the heads' sessions hold together."""
        return sum(self._items[rid].cells for rid in self._heads.values() if rid in self._items)

    def delete(self, response_id: str) -> None:
        found = self.get(response_id)
        del self._items[response_id]
        self._release(found)

    def _release(self, response: StoredResponse) -> None:
        sid = response.session_id
        if sid is not None and self._heads.get(sid) == response.id:
            del self._heads[sid]
            self.end_later(sid)

    def end_later(self, session_id: str) -> None:
        """End a session nobody heads (in the background: its KV is freed soon)."""

        async def end() -> None:
            with contextlib.suppress(JugglerError):
                await self.end_session(session_id)

        task = asyncio.get_running_loop().create_task(end())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._items)
