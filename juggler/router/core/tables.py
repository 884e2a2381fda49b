"""Which backend server holds a session or a stored response: the router's memory of
ids that live on one backend (sessions: `openai/sessions.py`; stored responses of the
Responses API: `openai/responses.py`). Touched only on the event loop.

A session's id is the backend's own session id (a random 128-bit hex string), so every
answer the backend gives names the same id the client uses in its URLs; a response's id
is the router's (`resp_...`). An entry records the manager's `server_id` of that
backend, unique per load: a reloaded model is another server, and the sessions and
responses of the old one are gone.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from juggler.errors import Conflict, ResponseNotFound, SessionNotFound, TooManyRequests


@dataclass(frozen=True)
class SessionEntry:
    model: str
    server_id: int
    #: The LoRA adapter the session runs with (its `model` is then the adapter's id).
    adapter_id: str | None = None


#: Open sessions the router keeps at most (the `max_sessions` setting's default).
MAX_SESSIONS = 4096


class SessionTable:
    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self._entries: dict[str, SessionEntry] = {}
        self.limit = limit

    def check_room(self) -> None:
        """Raise 429 when `limit` sessions are open (issue 27: nothing is unbounded)."""
        if len(self._entries) >= self.limit:
            raise TooManyRequests(
                f"{len(self._entries)} sessions are open (max_sessions); end some first",
                retry_after_s=5,
            )

    def add(self, session_id: str, entry: SessionEntry) -> None:
        if session_id in self._entries:
            raise Conflict(f"session {session_id!r} already exists", param="session_id")
        self._entries[session_id] = entry

    def get(self, session_id: str) -> SessionEntry:
        entry = self._entries.get(session_id)
        if entry is None:
            raise SessionNotFound(f"session {session_id!r} not found", param="session_id")
        return entry

    def drop(self, session_id: str) -> None:
        self._entries.pop(session_id, None)

    def prune(self, live_servers: Collection[int]) -> None:
        """Forget sessions whose backend is gone (their KV went with it)."""
        for sid in [s for s, e in self._entries.items() if e.server_id not in live_servers]:
            del self._entries[sid]

    def __len__(self) -> int:
        return len(self._entries)


#: Response ids the router remembers; the oldest are forgotten first.
MAX_RESPONSES = 65536


class ResponseTable:
    """Response id -> the server that holds it. Touched only on the event loop."""

    def __init__(self, capacity: int = MAX_RESPONSES) -> None:
        self.capacity = capacity
        self._entries: dict[str, SessionEntry] = {}

    def add(self, response_id: str, entry: SessionEntry, live_servers: set[int]) -> None:
        for rid in [r for r, e in self._entries.items() if e.server_id not in live_servers]:
            del self._entries[rid]
        self._entries[response_id] = entry
        while len(self._entries) > self.capacity:
            del self._entries[next(iter(self._entries))]

    def get(self, response_id: str, param: str | None = None) -> SessionEntry:
        entry = self._entries.get(response_id)
        if entry is None:
            raise ResponseNotFound(f"no response with id {response_id!r}", param=param)
        return entry

    def drop(self, response_id: str) -> None:
        self._entries.pop(response_id, None)
