"""SSE comment heartbeats while a backend says nothing (issue 49, part 5).

Issue 49: "While a long prompt is prefilled (minutes on a CPU), a streaming client
receives nothing, and proxies and clients time out. Send SSE comment heartbeats
(`: ping`) at a settable interval until the first token". Lemonade's streaming proxy
(its #3210) writes `: ping` whenever the backend has been silent for its interval, and so
does this: before the first token that is the whole prefill; after it, tokens keep the
stream busy and a ping goes out only if the backend stalls.

One `Heartbeat` per relayed stream, owned by the event loop: a task that sleeps until
`interval_s` after the stream's last bytes and then wakes the relay (`wake`, which makes
the relay's read return with nothing); the relay writes `PING` and goes on waiting.
Nothing runs per token but `heard()`, one clock read. The dialects that read the relayed
events instead of passing its bytes on see a ping as `PING_EVENT` (`sse.read_data`):
Anthropic's Messages API writes its own `ping` event, Ollama's NDJSON nothing (Ollama
sends nothing while it reads a prompt, and NDJSON has no comments).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from juggler.api import sse

#: An SSE comment: clients skip it, proxies and read timeouts see bytes.
PING = sse.PING


class Heartbeat:
    """Wakes a waiting relay when its stream has been silent for `interval_s`."""

    def __init__(self, interval_s: float, wake: Callable[[], None]) -> None:
        self.interval_s = interval_s
        self._wake = wake
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        #: A ping is owed: the relay writes it at its next wake-up.
        self.is_due = False
        self._task = self._loop.create_task(self._run())

    def heard(self) -> None:
        """The stream sent bytes (the relay calls this per chunk)."""
        self._last = self._loop.time()

    def take(self) -> bool:
        """Whether a ping is owed now; the owed ping is taken."""
        due, self.is_due = self.is_due, False
        return due

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._last + self.interval_s - self._loop.time()))
            if self._loop.time() - self._last >= self.interval_s:
                self.is_due = True
                self._last = self._loop.time()  # the ping is the stream's news
                self._wake()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
