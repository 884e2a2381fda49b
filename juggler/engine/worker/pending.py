"""Work waiting on a worker, in arrival order: stateless requests waiting for a sequence,
KV cells or a LoRA adapter slot, and session generates waiting for a sequence (a parked
session's, when every sequence is generating).

Both queues are bounded together (`SessionApi.max_waiting`), each entry times out after
`queue_timeout_s` (429), and an entry leaves at once when its client goes away
(`take_expired`); a session's generate also leaves when the session is ended or
cancelled (`remove`).

Owned by the worker thread (`SessionApi`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from juggler.engine.schedule.messages import Complete, Generate
from juggler.engine.schedule.stream import StreamSink


class _Waits(Protocol):
    @property
    def sink(self) -> StreamSink: ...


C = TypeVar("C", bound=_Waits)


class WaitQueue(Generic[C]):
    def __init__(self) -> None:
        self._queue: collections.deque[tuple[C, float]] = collections.deque()

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[C]:
        return (c for c, _ in self._queue)

    def __getitem__(self, i: int) -> C:
        return self._queue[i][0]

    def add(self, cmd: C, now: float) -> None:
        self._queue.append((cmd, now))

    def first(self) -> C | None:
        return self._queue[0][0] if self._queue else None

    def pop(self, i: int = 0) -> C:
        cmd = self._queue[i][0]
        del self._queue[i]
        return cmd

    def take_expired(self, now: float, timeout_s: float) -> tuple[list[C], list[C]]:
        """Remove and return (those whose client went away, those that waited too long)."""
        gone = [c for c, _ in self._queue if c.sink.is_cancelled]
        late = [c for c, t in self._queue if not c.sink.is_cancelled and now - t > timeout_s]
        if gone or late:
            drop = {id(c) for c in gone + late}
            self._queue = collections.deque(i for i in self._queue if id(i[0]) not in drop)
        return gone, late

    def drain(self) -> list[C]:
        out = [c for c, _ in self._queue]
        self._queue.clear()
        return out


class PendingGenerates(WaitQueue[Generate]):
    """Session generates waiting for a sequence."""

    def has(self, session_id: str) -> bool:
        return any(cmd.session_id == session_id for cmd in self)

    def remove(self, session_id: str) -> Generate | None:
        for i, cmd in enumerate(self):
            if cmd.session_id == session_id:
                return self.pop(i)
        return None


#: Stateless requests waiting for a sequence, cells or an adapter slot.
WaitingRequests = WaitQueue[Complete]
