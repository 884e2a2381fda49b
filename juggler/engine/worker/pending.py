"""Session generates waiting for a sequence, when every sequence is generating.

A parked session (see `session`) needs a sequence back before it can generate. When
every sequence of its worker is generating, its `generate` waits here, in order, until a
generation ends; it is bounded like the stateless queue (`SessionApi.max_waiting`, the
two queues together), times out after `queue_timeout_s` (429), and leaves at once when
its client goes away, the session is ended, or the session is cancelled.

Owned by the worker thread (`SessionApi`).
"""

from __future__ import annotations

import collections

from juggler.engine.schedule.messages import Generate


class PendingGenerates:
    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Generate, float]] = collections.deque()

    def __len__(self) -> int:
        return len(self._queue)

    def has(self, session_id: str) -> bool:
        return any(cmd.session_id == session_id for cmd, _ in self._queue)

    def add(self, cmd: Generate, now: float) -> None:
        self._queue.append((cmd, now))

    def first(self) -> Generate | None:
        return self._queue[0][0] if self._queue else None

    def pop_first(self) -> Generate:
        return self._queue.popleft()[0]

    def remove(self, session_id: str) -> Generate | None:
        for item in self._queue:
            if item[0].session_id == session_id:
                self._queue.remove(item)
                return item[0]
        return None

    def take_expired(self, now: float, timeout_s: float) -> tuple[list[Generate], list[Generate]]:
        """Remove and return (those whose client went away, those that waited too long)."""
        gone = [c for c, _ in self._queue if c.sink.is_cancelled]
        late = [c for c, t in self._queue if not c.sink.is_cancelled and now - t > timeout_s]
        if gone or late:
            drop = {id(c) for c in gone + late}
            self._queue = collections.deque(i for i in self._queue if id(i[0]) not in drop)
        return gone, late

    def drain(self) -> list[Generate]:
        out = [c for c, _ in self._queue]
        self._queue.clear()
        return out
