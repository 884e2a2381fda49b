"""The compute board: one small shared-memory file per backend, written by the router's
manager and read by the backend before every decode.

A read costs one 8-byte load when nothing changed, so a plan change reaches a busy
backend at its next decode step (milliseconds), with no request and no thread waiting
for one. Layout (little endian, 16 + 128 bytes):

    0   u64  sequence: odd while the writer is writing, bumped by 2 per write
    8   u32  threads
    12  u32  flags (bit 0: busy, bit 1: fixed)
    16  128 bytes: the CPU set as a bitmap (CPUs 0..1023)

Writers and readers follow the seqlock rule: a reader retries (at its next step) when
the sequence was odd or changed while it read.
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import tempfile
from pathlib import Path

from juggler.compute.plan import Share

#: The environment variable that hands a backend its board file.
ENV = "JUGGLER_COMPUTE_BOARD"
_HEAD = struct.Struct("<QII")
_MASK_BYTES = 128
SIZE = _HEAD.size + _MASK_BYTES
MAX_CPUS = _MASK_BYTES * 8


def _mask(cpus: tuple[int, ...]) -> bytes:
    bits = bytearray(_MASK_BYTES)
    for cpu in cpus:
        if 0 <= cpu < MAX_CPUS:
            bits[cpu // 8] |= 1 << (cpu % 8)
    return bytes(bits)


def _cpus(bits: bytes) -> tuple[int, ...]:
    return tuple(i for i in range(len(bits) * 8) if bits[i // 8] >> (i % 8) & 1)


class BoardWriter:
    """The manager's side: a folder of board files, one per server id."""

    def __init__(self, folder: Path | None = None) -> None:
        #: The folder is ours to remove (made here) unless the caller gave it.
        self._owns_folder = folder is None
        if folder is None:
            shm = Path("/dev/shm")
            base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
            folder = Path(tempfile.mkdtemp(prefix="juggler-compute-", dir=base))
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._maps: dict[int, mmap.mmap] = {}
        self._written: dict[int, Share] = {}

    def path(self, key: int) -> Path:
        return self.folder / f"{key}.board"

    def open(self, key: int, share: Share) -> Path:
        """Create `key`'s board holding `share`; returns its path (for the backend)."""
        path = self.path(key)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self._maps[key] = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.write(key, share)
        return path

    def write(self, key: int, share: Share) -> None:
        """Publish `share` to `key`'s board (nothing happens when it is unchanged)."""
        mm = self._maps.get(key)
        if mm is None or self._written.get(key) == share:
            return
        (seq,) = struct.unpack_from("<Q", mm, 0)
        seq |= 1
        struct.pack_into("<Q", mm, 0, seq)
        flags = (1 if share.busy else 0) | (2 if share.fixed else 0)
        struct.pack_into("<II", mm, 8, share.threads, flags)
        mm[_HEAD.size : SIZE] = _mask(share.cpus)
        struct.pack_into("<Q", mm, 0, seq + 1)
        self._written[key] = share

    def close(self, key: int) -> None:
        mm = self._maps.pop(key, None)
        self._written.pop(key, None)
        if mm is not None:
            mm.close()
        self.path(key).unlink(missing_ok=True)

    def close_all(self) -> None:
        for key in list(self._maps):
            self.close(key)
        if self._owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


class BoardReader:
    """The backend's side: `read()` returns the latest share, cheaply."""

    def __init__(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._mm = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._seq = -1
        self._share: Share | None = None

    @property
    def sequence(self) -> int:
        return int(struct.unpack_from("<Q", self._mm, 0)[0])

    def read(self) -> Share | None:
        """The share last published (None before the first one could be read)."""
        mm = self._mm
        (seq,) = struct.unpack_from("<Q", mm, 0)
        if seq == self._seq or seq & 1:
            return self._share
        _, threads, flags = _HEAD.unpack_from(mm, 0)
        cpus = _cpus(bytes(mm[_HEAD.size : SIZE]))
        if struct.unpack_from("<Q", mm, 0)[0] != seq:
            return self._share  # written meanwhile: read it at the next step
        self._seq = seq
        self._share = Share(max(1, threads), cpus, bool(flags & 1), bool(flags & 2))
        return self._share

    def close(self) -> None:
        self._mm.close()


def reader_from_env() -> BoardReader | None:
    """The board the manager handed this process, if any."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        return BoardReader(path)
    except OSError:
        return None
