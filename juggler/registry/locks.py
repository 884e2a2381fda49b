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
import fcntl
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

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


def temp_beside(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
