"""The compute board: a share written by the manager is what the backend reads."""

from __future__ import annotations

import struct
from pathlib import Path

from juggler.compute.board import BoardReader, BoardWriter
from juggler.compute.plan import Share


def test_a_written_share_is_read_back_and_a_change_is_seen_at_the_next_read(
    tmp_path: Path,
) -> None:
    writer = BoardWriter(tmp_path / "boards")
    path = writer.open(5, Share(8, tuple(range(8))))
    reader = BoardReader(path)
    assert reader.read() == Share(8, tuple(range(8)))
    seq = reader.sequence
    writer.write(5, Share(8, tuple(range(8))))  # unchanged: not written again
    assert reader.sequence == seq
    writer.write(5, Share(3, (4, 5, 700), busy=True))
    assert reader.read() == Share(3, (4, 5, 700), busy=True)
    writer.write(5, Share(2, (0, 1), fixed=True))
    assert reader.read() == Share(2, (0, 1), fixed=True)
    reader.close()
    writer.close_all()
    assert not path.exists()


def test_a_read_during_a_write_keeps_the_last_whole_share(tmp_path: Path) -> None:
    writer = BoardWriter(tmp_path)
    path = writer.open(1, Share(2, (0, 1)))
    reader = BoardReader(path)
    assert reader.read() == Share(2, (0, 1))
    with open(path, "r+b") as f:  # a writer stopped half way: the sequence is odd
        (seq,) = struct.unpack("<Q", f.read(8))
        f.seek(0)
        f.write(struct.pack("<QI", seq + 1, 9))
    assert reader.read() == Share(2, (0, 1))
    reader.close()
    writer.close_all()
