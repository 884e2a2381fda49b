"""Everything one worker thread hands to the event loop, delivered in order, in batches.

A worker produces a token event for every generating session on every tick, plus
command replies and notices for the master. Posting each one with
`loop.call_soon_threadsafe` wakes the event loop once per item; on a 2-core machine
those wake-ups preempt llama.cpp's compute threads mid-decode (measured: about 4 ms of
every 55 ms decode at 8 streams). The worker instead queues items here and `flush()`es
at a few points of its tick, so the loop wakes at most a few times per tick and runs
the items in the order they were queued.

Only the owning worker thread calls `call`/`resolve`/`reject`/`flush`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

Item = tuple[Callable[..., Any], tuple[Any, ...]]


def _run_all(items: list[Item]) -> None:
    for fn, args in items:
        fn(*args)


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class Outbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: list[Item] = []
        #: How many times the loop was woken.
        self.num_flushes = 0

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the event loop at the next flush."""
        self._items.append((fn, args))

    def resolve(self, fut: asyncio.Future[Any] | None, value: Any) -> None:
        if fut is not None:
            self.call(_set_result, fut, value)

    def reject(self, fut: asyncio.Future[Any] | None, exc: BaseException) -> None:
        if fut is not None:
            self.call(_set_exception, fut, exc)

    def flush(self) -> None:
        """Hand everything queued so far to the loop with one wake-up."""
        if not self._items:
            return
        items, self._items = self._items, []
        self.num_flushes += 1
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            self.loop.call_soon_threadsafe(_run_all, items)
