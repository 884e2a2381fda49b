"""A backend's output pipe goes unchanged to its log file and, line by line, to the
LogBook under the model's name (manager/output.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from juggler.logbook import LogBook
from juggler.manager.output import OutputPump


def test_output_goes_to_the_file_and_the_book_line_by_line(tmp_path: Path) -> None:
    async def main() -> None:
        book = LogBook()
        read_fd, write_fd = os.pipe()
        pump = OutputPump(read_fd, tmp_path / "m.log", "m", book)
        pump.start()
        os.write(write_fd, b"loading 10%\rloading 100%\nhalf a ")
        os.write(write_fd, b"line\n\n   \nERROR: no end of line")
        os.close(write_fd)
        await pump.drain(timeout_s=60)  # returns as soon as the pipe has closed
        assert (tmp_path / "m.log").read_bytes() == (
            b"loading 10%\rloading 100%\nhalf a line\n\n   \nERROR: no end of line"
        )
        lines, _ = book.query(source="m")
        assert [(line.text, line.level) for line in lines] == [
            ("loading 100%", "info"),
            ("half a line", "info"),
            ("ERROR: no end of line", "error"),
        ]

    asyncio.run(main())


def test_drain_stops_reading_a_pipe_that_stays_open(tmp_path: Path) -> None:
    """A grandchild may hold the pipe open after the backend is gone: stopping the
    backend must not wait for it."""

    async def main() -> None:
        read_fd, write_fd = os.pipe()
        pump = OutputPump(read_fd, tmp_path / "m.log", "m", None)
        pump.start()
        os.write(write_fd, b"still here\n")
        log = tmp_path / "m.log"
        for _ in range(6000):  # read before the drain starts, however busy the machine
            if log.exists() and log.read_bytes() == b"still here\n":
                break
            await asyncio.sleep(0.01)
        await pump.drain(timeout_s=0.2)  # returns, though the pipe is still open
        os.close(write_fd)
        assert log.read_bytes() == b"still here\n"

    asyncio.run(main())
