"""A worker's session table: session id -> `Session`, and which sequence ids are free.

Owned by one worker thread. The table knows which sessions exist and which sequence
each one holds; what their KV cells hold and cost is `KvBook`'s business.
"""

from __future__ import annotations

from collections.abc import ValuesView

from juggler.engine.cache.prefix_cache import CachedSeq
from juggler.engine.worker.session import Session, SessionState
from juggler.errors import SessionNotFound


class SessionTable:
    def __init__(self, n_seq_max: int) -> None:
        self.n_seq_max = n_seq_max
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def values(self) -> ValuesView[Session]:
        """Every session (a live view: copy it before adding or removing sessions)."""
        return self._sessions.values()

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def api_session(self, session_id: str) -> Session:
        """The client-created session `session_id`; raises SessionNotFound (stateless
        requests' ephemeral sessions are not addressable)."""
        s = self._sessions.get(session_id)
        if s is None or s.is_ephemeral:
            raise SessionNotFound(f"session not found: {session_id}")
        return s

    def add(self, s: Session) -> None:
        self._sessions[s.session_id] = s

    def remove(self, s: Session) -> None:
        self._sessions.pop(s.session_id, None)
        s.state = SessionState.CLOSED

    def free_seq_ids(self) -> list[int]:
        used = {s.seq_id for s in self._sessions.values()}
        return [i for i in range(self.n_seq_max) if i not in used]

    def by_seq(self) -> dict[int, Session]:
        return {s.seq_id: s for s in self._sessions.values() if s.has_seq}

    def num_parked(self) -> int:
        """API sessions parked in host memory (holding no sequence)."""
        return sum(1 for s in self._sessions.values() if not s.has_seq)

    # -- cached sequences (finished stateless requests whose KV is kept) ---------------
    def cached(self) -> list[CachedSeq]:
        return [
            CachedSeq(s.seq_id, tuple(s.tokens), s.last_used, s.adapter_id)
            for s in self._sessions.values()
            if s.state is SessionState.CACHED
        ]

    def cached_at(self, seq_id: int) -> Session | None:
        for s in self._sessions.values():
            if s.seq_id == seq_id and s.state is SessionState.CACHED:
                return s
        return None

    # -- views for the loop and the snapshot ---------------------------------------------
    def is_generating(self) -> bool:
        return any(s.generation is not None for s in self._sessions.values())

    def running(self) -> list[Session]:
        """The sessions generating now."""
        return [s for s in self._sessions.values() if s.generation is not None]

    def num_running(self) -> int:
        return sum(1 for s in self._sessions.values() if s.generation is not None)

    def num_api_sessions(self) -> int:
        return sum(1 for s in self._sessions.values() if not s.is_ephemeral)

    def num_cached(self) -> int:
        return sum(1 for s in self._sessions.values() if s.state is SessionState.CACHED)
