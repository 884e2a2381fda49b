"""The memory monitor: seed 002's "A background monitor samples global VRAM usage [...]
When `auto_evict` is disabled, no VRAM polling occurs."

One asyncio task, which the owner starts while any model is opted in (the global
`auto_evict`, or a model loaded with its own) and cancels when none is, so nothing polls
otherwise. Every `interval_s` it samples each source in a thread (the GPU's memory and
the host's, issue 48: "watches VRAM the way it watches RAM") and posts each sample to
the owner, which decides (`pressure.relief_step`) and acts; the next sample measures
again after that step. The task holds no table state. The first source is the one
health names (the GPU's where there is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from juggler.manager import messages as m
from juggler.manager.memory import MemorySample, MemorySource, kind_of

log = logging.getLogger("juggler.manager")

#: Seconds between samples while the monitor runs.
INTERVAL_S = 2.0


class Monitor:
    def __init__(
        self,
        source: MemorySource | None,
        post: Callable[[m.Message], None],
        interval_s: float = INTERVAL_S,
        more: Sequence[MemorySource] = (),
    ) -> None:
        """`source` first, then `more`: every source is sampled each round."""
        self.sources = [s for s in (source, *more) if s is not None]
        self.post = post
        self.interval_s = interval_s
        #: Samples taken since start (a test proves it stays 0 while nothing opts in).
        self.num_samples = 0
        #: Each source's last sample, by source name.
        self.last_by_name: dict[str, MemorySample] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def source(self) -> MemorySource | None:
        """The source health names (the first)."""
        return self.sources[0] if self.sources else None

    @property
    def last(self) -> MemorySample | None:
        """The first source's last sample."""
        source = self.source
        return self.last_by_name.get(source.name) if source is not None else None

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    def ensure(self, wanted: bool) -> None:
        """Start or stop the task so that it runs exactly while `wanted` (owner task)."""
        if wanted and not self.is_running and self.sources:
            log.info("memory monitor on (%s)", ", ".join(s.name for s in self.sources))
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
        while True:
            for source in self.sources:
                try:
                    sample = await asyncio.to_thread(source.sample)
                except Exception:  # a driver hiccup must not end the monitor
                    log.exception("memory monitor: sampling %s failed", source.name)
                else:
                    self.last_by_name[source.name] = sample
                    self.num_samples += 1
                    self.post(m.MemorySampled(sample, kind_of(source)))
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
