"""Graceful drain: on SIGTERM, streams may finish for `drain_timeout` seconds, then end.

uvicorn stops accepting connections when the signal arrives and waits for the open ones;
`Drain.begin()` (called from the signal handler, on the loop's thread) starts the clock.
When it runs out, every stream still relaying gets an error event and
ends, and every request still waiting is answered with 503, so the process exits with
no client left hanging and no stream cut without a word. Then the app's shutdown stops
the backends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("juggler.router")


class Drain:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.is_draining = False
        self.is_expired = False
        self._on_expire: list[Callable[[], None]] = []

    def on_expire(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the event loop when the drain time is up."""
        self._on_expire.append(callback)

    def begin(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start draining (idempotent). Safe to call from a signal handler."""
        if self.is_draining:
            return
        self.is_draining = True
        log.info("draining: open streams may go on for %.0f s", self.timeout_s)
        loop.call_soon_threadsafe(loop.call_later, self.timeout_s, self._expire)

    def _expire(self) -> None:
        log.info("drain time is up: ending the streams still open")
        self.is_expired = True
        for callback in self._on_expire:
            callback()
