"""The memory monitor: seed 002's "A background monitor samples global VRAM usage [...]
When `auto_evict` is disabled, no VRAM polling occurs."

One asyncio task, which the owner starts while any model is opted in (the global
`auto_evict`, or a model loaded with its own) and cancels when none is, so nothing polls
otherwise. Every `interval_s` it samples the source in a thread and posts the sample to
the owner, which decides (`pressure.relief_step`) and acts; the next sample measures
again after that step. The task holds no table state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from juggler.manager import messages as m
from juggler.manager.memory import MemorySample, MemorySource

log = logging.getLogger("juggler.manager")

#: Seconds between samples while the monitor runs.
INTERVAL_S = 2.0


class Monitor:
    def __init__(
        self,
        source: MemorySource | None,
        post: Callable[[m.Message], None],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.source = source
        self.post = post
        self.interval_s = interval_s
        #: Samples taken since start (a test proves it stays 0 while nothing opts in).
        self.num_samples = 0
        self.last: MemorySample | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    def ensure(self, wanted: bool) -> None:
        """Start or stop the task so that it runs exactly while `wanted` (owner task)."""
        if wanted and not self.is_running and self.source is not None:
            log.info("memory monitor on (%s)", self.source.name)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="memory-monitor")
        elif not wanted and self._task is not None:
            log.info("memory monitor off")
            self._task.cancel()
            self._task = None

    async def sample_now(self) -> MemorySample | None:
        """One sample, off the event loop (for the simulation hook's total)."""
        if self.source is None:
            return None
        return await asyncio.to_thread(self.source.sample)

    async def _run(self) -> None:
        assert self.source is not None
        while True:
            try:
                sample = await asyncio.to_thread(self.source.sample)
            except Exception:  # a driver hiccup must not end the monitor
                log.exception("memory monitor: sampling %s failed", self.source.name)
            else:
                self.last = sample
                self.num_samples += 1
                self.post(m.MemorySampled(sample))
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
