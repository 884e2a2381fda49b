"""How much one file upload (Ollama's `POST /api/blobs/...`) may write: at most
`max_upload_bytes` (413), and never so much that the model cache's filesystem keeps
less than `MIN_FREE_BYTES` free (507). A declared Content-Length is checked before a
byte is read; the bytes are counted as they stream either way (a client may send no
length, or lie), and the free space is measured again every `RECHECK_BYTES`, since
other writers share the disk. Pure; the route measures the disk and owns the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from juggler.errors import InsufficientStorage, PayloadTooLarge

#: Free space an upload must leave on the model cache's filesystem.
MIN_FREE_BYTES = 1 << 30
#: How often (in bytes received) the free space is measured again.
RECHECK_BYTES = 64 << 20


@dataclass
class UploadBudget:
    """One upload's limits. `free_bytes`: free space on the target filesystem when the
    upload started."""

    max_bytes: int
    free_bytes: int
    received: int = 0
    _next_check: int = RECHECK_BYTES

    def check_declared(self, declared: int | None) -> None:
        """Before reading: refuse a Content-Length over a limit (or no room at all)."""
        self._check(declared or 0, self.free_bytes)

    def take(self, num_bytes: int) -> bool:
        """Count a received chunk (before it is written); raises when a limit is passed.
        True when the free space should be measured again (`recheck`)."""
        self.received += num_bytes
        self._check(self.received, self.free_bytes)
        if self.received < self._next_check:
            return False
        self._next_check = self.received + RECHECK_BYTES
        return True

    def recheck(self, free_now: int) -> None:
        """`free_now` counts what this upload already wrote as used."""
        self._check(0, free_now)

    def _check(self, more: int, free: int) -> None:
        if more > self.max_bytes:
            raise PayloadTooLarge(
                f"the upload is larger than max_upload_bytes ({self.max_bytes} bytes)"
            )
        if free - more < MIN_FREE_BYTES:
            raise InsufficientStorage(
                f"the upload would leave less than {MIN_FREE_BYTES >> 20} MiB free on the "
                f"model cache's filesystem ({free >> 20} MiB free)"
            )
