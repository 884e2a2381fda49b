"""A backend's stdout and stderr: one pipe, read by one task in the router's loop.

Everything the backend writes goes, unchanged, to its log file (one per load; read back
to explain a failed load) and, split into lines, to the router's `LogBook` under the
model's name, for the dashboard's Logs page. The task ends when the pipe closes (the
backend and anything it started are gone); `OutputPump.close` ends it sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

from juggler.logbook import LogBook

CHUNK = 65536


class OutputPump:
    """Owns the read end of a backend's output pipe and the task that drains it."""

    def __init__(self, read_fd: int, log_path: Path, source: str, book: LogBook | None) -> None:
        self.log_path = log_path
        self.source = source
        self.book = book
        self._file = os.fdopen(read_fd, "rb", buffering=0)
        self._partial = b""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"output:{self.source}"
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), self._file
        )
        log = self._open_log()
        try:
            while chunk := await reader.read(CHUNK):
                if log is not None:
                    try:
                        log.write(chunk)
                    except OSError:  # a full disk must not block the backend's writes
                        log.close()
                        log = None
                self._to_book(chunk)
            if self._partial:
                self._to_book(b"\n")
        finally:
            transport.close()
            if log is not None:
                log.close()

    def _open_log(self) -> BinaryIO | None:
        try:
            return self.log_path.open("ab", buffering=0)
        except OSError:
            return None

    def _to_book(self, chunk: bytes) -> None:
        if self.book is None:
            return
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            if text.strip():
                self.book.append(self.source, text.rsplit("\r", 1)[-1])

    async def drain(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the output to end (the pipe to close); then stop
        reading. Returns once the task is over."""
        if self._task is None:
            self._file.close()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await self._task

    async def settle(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for what is still in the pipe to be written out (after
        the backend exited), without stopping the task."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, OSError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
