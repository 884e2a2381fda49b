"""Response id -> the backend server that holds the stored response (see
router/responses.py); like the session table, and touched only on the event loop."""

from __future__ import annotations

from juggler.errors import ResponseNotFound
from juggler.router.session_table import SessionEntry

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
