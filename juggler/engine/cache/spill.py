"""Where parked sessions keep their KV: host memory up to a budget, then disk.

Issue 11: "Open sessions are not lost: their KV state is saved to host memory (or disk
past a budget) and restored on their next input." A parked session's KV (a copy of its
sequence's state, see `session`) stays in memory while the parked sessions of this
worker hold at most `budget_bytes`; past that, the least recently used copies are written
to files in a private directory (mode 0700) and read back (then deleted) when their
session needs its sequence again. A spilled copy comes back as `bytes`; the context's
`restore_seq_state` takes bytes as well as its own copies.

Owned by one worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Spilled:
    """A parked KV copy written to disk."""

    path: Path
    size: int


def size_of(state: Any) -> int:
    """Bytes a KV copy holds in memory (a spilled one: none)."""
    if isinstance(state, Spilled) or state is None:
        return 0
    return memoryview(state).nbytes if _is_buffer(state) else len(state)


def _is_buffer(state: Any) -> bool:
    try:
        memoryview(state)
    except TypeError:
        return False
    return True


class SpillStore:
    def __init__(self, budget_bytes: int, worker_id: int = 0) -> None:
        self.budget_bytes = budget_bytes
        self.worker_id = worker_id
        self._dir: Path | None = None
        self.num_spilled = 0
        self.spilled_bytes = 0

    def over_budget(self, in_memory: int) -> bool:
        return in_memory > self.budget_bytes

    def spill(self, state: Any, name: str) -> Spilled | Any:
        """Write `state` to disk; returns what the session keeps instead (the state
        itself if it cannot be written: memory is then the fallback, never a loss)."""
        if not _is_buffer(state):
            return state
        try:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix=f"juggler-kv-{self.worker_id}-"))
            path = self._dir / f"{name}.kv"
            data = memoryview(state).cast("B")
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            log.warning("worker %d: could not spill parked KV to disk: %s", self.worker_id, exc)
            return state
        self.num_spilled += 1
        self.spilled_bytes += data.nbytes
        return Spilled(path, data.nbytes)

    def load(self, state: Any) -> Any:
        """The KV copy to restore: `state` itself, or a spilled one read back (and its
        file deleted). None if the file is gone (the session decodes its tokens again)."""
        if not isinstance(state, Spilled):
            return state
        try:
            data = state.path.read_bytes()
        except OSError:
            return None
        finally:
            self.drop(state)
        return data

    def drop(self, state: Any) -> None:
        if isinstance(state, Spilled):
            self.spilled_bytes -= state.size
            with contextlib.suppress(OSError):
                os.unlink(state.path)

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
