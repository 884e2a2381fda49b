"""The watchdog's eyes on backends that are alive but stuck (issue 27).

A backend whose engine holds work and finishes no step (a grammar that explodes inside
llama.cpp, a wedged thread) still answers HTTP, so a request that fails to connect never
reveals it. Every `interval_s` this task asks each ready llama.cpp backend's `/health`;
one that says `stalled` is reported to the owner as a failed probe, which stops it and
has the watchdog restart it (its requests in flight end with an error). A backend that
is slow to answer, or busy on a long request that progresses, is left alone: only the
backend's own verdict counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from juggler.manager import messages as m
from juggler.manager.snapshot import ServerSnapshot, ServerState

log = logging.getLogger("juggler.manager")

#: Seconds between two sweeps.
INTERVAL_S = 5.0

#: Asks one backend's /health; returns its JSON body's `status` (None: no answer).
Ask = Callable[[ServerSnapshot], Awaitable[str | None]]


class StallWatch:
    def __init__(
        self,
        servers: Callable[[], Sequence[ServerSnapshot]],
        ask: Ask,
        post: Callable[[m.Message], None],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._servers = servers
        self._ask = ask
        self._post = post
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.num_restarts = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="juggler-stall-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sweep(self) -> None:
        ready = [
            s for s in self._servers() if s.status is ServerState.READY and s.recipe == "llamacpp"
        ]
        verdicts = await asyncio.gather(*(self._ask(s) for s in ready))
        for server, status in zip(ready, verdicts, strict=True):
            if status == "stalled":
                log.warning("manager: %s is stalled; restarting it", server.model_name)
                self.num_restarts += 1
                self._post(m.ProbeFailed(server.server_id, None))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sweep()
            except Exception:
                log.exception("manager: the stall sweep failed")
