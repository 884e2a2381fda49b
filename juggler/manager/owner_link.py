"""The Manager's line to its owner task: messages it sends, and the table it reads back.

`OwnerLink` is the part of the `Manager` (manager.py) that owns the channel to the owner
task (owner.py): its inbox, posting a message from the loop or from another thread
(`_post`), asking and awaiting the answer (`_ask`, which gives back a lease handed to a
caller cancelled meanwhile), and the immutable `TableSnapshot` the owner publishes after
every message, which every read (health, /stats, the routes' views) takes without
waiting. Building the owner, and what each request asks of it, are the `Manager`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from juggler.errors import JugglerError
from juggler.manager import messages as m
from juggler.manager.lease import Lease
from juggler.manager.policy import all_slots_pinned
from juggler.manager.snapshot import MemoryStatus, ServerSnapshot, TableSnapshot
from juggler.types import MODEL_TYPE_ORDER, ModelType

T = TypeVar("T")


class OwnerLink:
    """The inbox, the owner task and its loop (set by the `Manager`'s `start`), and the
    snapshot published last."""

    def __init__(self, limits: tuple[int, ...]) -> None:
        self._inbox: asyncio.Queue[m.Message] = asyncio.Queue()
        self._published = TableSnapshot(limits=limits)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- reads (no waiting; the owner's last published snapshot) ------------------------
    def memory_status(self) -> MemoryStatus | None:
        """The global switch, threshold, source and last sample (health)."""
        return self._published.memory

    def snapshot(self) -> list[ServerSnapshot]:
        """Every server in the table, including ones loading or being evicted."""
        return list(self._published.servers)

    def most_recent(self) -> ServerSnapshot | None:
        """The most recently loaded ready server (health's model_loaded)."""
        return self._published.most_recent

    def max_models(self) -> dict[str, int]:
        return {t.value: n for t, n in zip(MODEL_TYPE_ORDER, self._published.limits, strict=True)}

    def slots_all_pinned(self, model_type: ModelType) -> bool:
        """Seed 002's pre-emptive warning: every slot of this type holds a pinned model."""
        published = self._published
        return all_slots_pinned(model_type, published.views, published.limits_by_type())

    def restarts(self) -> dict[str, Any]:
        """The watchdog's view (health): pending restarts and the models it gave up on."""
        published = self._published
        return {
            "restarting": [
                {"model_name": name, "attempt": attempt + 1, "due_at": due_at}
                for name, attempt, due_at in published.restarting
            ],
            "gave_up": list(published.gave_up),
        }

    def stats(self) -> dict[str, int]:
        """Counters since start: loads, load_failures, evictions, backend_deaths,
        backend_restarts, restart_give_ups, idle_evictions (each once it happened), and
        queued (loads queued or running)."""
        if self._task is None:
            return {}
        return {**dict(self._published.counters), "queued": self._published.num_queued}

    # -- messages to the owner ---------------------------------------------------------
    def _on_publish(self, published: TableSnapshot) -> None:
        self._published = published

    def _post(self, msg: m.Message) -> None:
        """Send a message to the owner; callable from the loop or from another thread."""
        if self._loop is None or self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._inbox.put_nowait(msg)
        else:
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, msg)

    async def _ask(self, make: Callable[[asyncio.Future[T]], m.Message]) -> T:
        """Post the message `make(future)` and await its answer. A caller cancelled after
        the owner handed it a lease gives the lease back."""
        if self._task is None or self._task.done():
            raise JugglerError("The model manager is not running")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._post(make(future))
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                result = future.result()
                if isinstance(result, Lease):
                    result.release()
            raise
