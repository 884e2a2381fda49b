"""A JSON object file read again only when it changed (its stat: time, size, inode), for
the small files a request consults (`adapters.json`, `modelfiles.json`): a request pays a
stat, not a read and a parse (issue 47's per-request budget). Writers replace the file
(`locks.edited_json`), so a change is a new inode even within one clock tick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class JsonCache:
    def __init__(self) -> None:
        self._read: tuple[tuple[str, int, int, int], dict[str, Any]] | None = None

    def read(self, path: Path) -> dict[str, Any]:
        """The file's object ({} when missing, unreadable or not an object); not to be
        mutated (writers edit the file)."""
        try:
            st = path.stat()
        except OSError:
            return {}
        key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
        if self._read is not None and self._read[0] == key:
            return self._read[1]
        try:
            data = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            data = {}
        entries = data if isinstance(data, dict) else {}
        self._read = (key, entries)
        return entries
