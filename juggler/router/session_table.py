"""Router session id -> the backend that holds the session (see router/sessions.py)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from juggler.errors import SessionNotFound


@dataclass(frozen=True)
class SessionEntry:
    model: str
    pid: int | None
    backend_id: str


class SessionTable:
    """Router session id -> where the session lives. Touched only on the event loop."""

    def __init__(self) -> None:
        self._entries: dict[str, SessionEntry] = {}

    def add(self, entry: SessionEntry) -> str:
        session_id = "s-" + secrets.token_hex(8)
        self._entries[session_id] = entry
        return session_id

    def get(self, session_id: str) -> SessionEntry:
        entry = self._entries.get(session_id)
        if entry is None:
            raise SessionNotFound(f"session {session_id!r} not found", param="session_id")
        return entry

    def drop(self, session_id: str) -> None:
        self._entries.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._entries)
