"""One writer per model file: concurrent loads and pulls of the same file coalesce.

`exclusive(target)` holds a lock for `target` across threads of this process (a
`threading.Lock` per path) and across processes (`fcntl.flock` on `<target>.lock`, so
a `juggler pull` in a shell and a load in the server do not assemble the same file
twice). Whoever gets the lock second finds the file written and uses it.
`temp_beside(target)` names a unique temporary file in the same directory, so the final
`os.replace` is atomic and no two writers ever share a partial file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from juggler.errors import InsufficientStorage

_guard = threading.Lock()
_locks: dict[Path, threading.Lock] = {}


def _thread_lock(path: Path) -> threading.Lock:
    with _guard:
        return _locks.setdefault(path, threading.Lock())


@contextlib.contextmanager
def exclusive(target: Path) -> Iterator[None]:
    """Blocks until this thread is the only writer of `target`, here or elsewhere."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with _thread_lock(target.resolve()):
        fd = os.open(target.with_name(target.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextlib.contextmanager
def disk_errors(what: str) -> Iterator[None]:
    """Turn a full disk or quota while writing `what` into a clear InsufficientStorage."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InsufficientStorage(f"no space left to write {what}: {exc.strerror}") from exc
        raise


def temp_beside(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


@contextlib.contextmanager
def edited_json(path: Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write of a JSON object file under its lock (the server and a CLI may
    both write it); the new file replaces the old one atomically. A missing or non-object
    file reads as {}."""
    with exclusive(path):
        try:
            data = json.loads(path.read_text() or "{}")
        except FileNotFoundError:
            data = {}
        entries: dict[str, Any] = data if isinstance(data, dict) else {}
        yield entries
        tmp = temp_beside(path)
        try:
            tmp.write_text(json.dumps(entries, indent=2) + "\n")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
