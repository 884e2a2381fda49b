"""Recent log lines in memory, for the dashboard's Logs page and `GET /api/v1/logs`.

A `LogBook` keeps one bounded ring of lines per source: `router` (the router's own
records, through `RingHandler`) and one per model (its backend's stdout and stderr,
captured by the process spawner, every load of that model in one ring). Each line gets
a sequence number, so a reader polls for what came after the last line it saw.

Lines arrive from the event loop (backend output) and from any thread that logs (the
router's handler), so the book is the one owner of its rings and guards them with one
lock held only for an append or a copy. Memory is bounded: `max_lines` per source, each
line cut at `MAX_LINE_CHARS`, and at most `max_sources` sources (the one written to least
recently is dropped first; `router` never is).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

ROUTER = "router"
MAX_LINE_CHARS = 2000
LEVELS = ("debug", "info", "warning", "error", "critical")
_LEVEL_RANK = {name: rank for rank, name in enumerate(LEVELS)}
#: A level word near the start of a backend's line (Python logging, uvicorn).
_LEVEL_WORD = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b")


@dataclass(frozen=True)
class LogLine:
    seq: int
    time: float
    source: str
    level: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.time,
            "source": self.source,
            "level": self.level,
            "text": self.text,
        }


def level_of(text: str) -> str:
    """The level a backend's line names in its first 48 characters ("info" when none)."""
    found = _LEVEL_WORD.search(text[:48])
    if not found:
        return "info"
    word = found.group(1).lower()
    return "warning" if word == "warn" else word


def at_least(level: str, minimum: str) -> bool:
    return _LEVEL_RANK.get(level, 1) >= _LEVEL_RANK.get(minimum, 0)


class LogBook:
    def __init__(self, max_lines: int = 1000, max_sources: int = 16) -> None:
        self.max_lines = max_lines
        self.max_sources = max_sources
        self._lock = threading.Lock()
        self._rings: dict[str, deque[LogLine]] = {}
        self._written: dict[str, float] = {}
        self._seq = 0

    def append(self, source: str, text: str, level: str | None = None) -> None:
        """Add one line (any thread). `level` defaults to what the text names."""
        text = text[:MAX_LINE_CHARS]
        now = time.time()
        with self._lock:
            self._seq += 1
            ring = self._rings.get(source)
            if ring is None:
                self._make_room()
                ring = self._rings[source] = deque(maxlen=self.max_lines)
            ring.append(LogLine(self._seq, now, source, level or level_of(text), text))
            self._written[source] = now

    def _make_room(self) -> None:
        while len(self._rings) >= self.max_sources:
            others = [s for s in self._rings if s != ROUTER]
            if not others:
                return
            oldest = min(others, key=lambda s: self._written[s])
            del self._rings[oldest], self._written[oldest]

    def query(
        self,
        *,
        source: str | None = None,
        since: int = 0,
        contains: str = "",
        level: str | None = None,
        limit: int = 500,
    ) -> tuple[list[LogLine], int]:
        """The newest `limit` lines after sequence number `since` that match, oldest
        first, and the sequence number to ask from next time."""
        with self._lock:
            rings = [self._rings[source]] if source in self._rings else []
            if source is None:
                rings = list(self._rings.values())
            lines = [line for ring in rings for line in ring if line.seq > since]
            last = self._seq
        needle = contains.lower()
        picked = [
            line
            for line in lines
            if (not needle or needle in line.text.lower())
            and (level is None or at_least(line.level, level))
        ]
        picked.sort(key=lambda line: line.seq)
        return picked[-limit:] if limit > 0 else [], last

    def sources(self) -> list[dict[str, Any]]:
        """Every source, the router first, then by name."""
        with self._lock:
            counts = {name: len(ring) for name, ring in self._rings.items()}
        names = sorted(counts, key=lambda n: (n != ROUTER, n))
        return [{"name": n, "num_lines": counts[n]} for n in names]


class RingHandler(logging.Handler):
    """A logging handler that writes the router's records into a LogBook."""

    def __init__(self, book: LogBook, source: str = ROUTER) -> None:
        super().__init__()
        self.book = book
        self.source = source
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.book.append(self.source, self.format(record), record.levelname.lower())
        except Exception:
            self.handleError(record)
