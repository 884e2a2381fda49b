"""The thread plumbing shared by every engine worker (generation and embedding).

A worker is one thread that alone owns one llama context. Others talk to it only through
`submit(cmd)` (a thread-safe inbox the thread drains) and get answers on each command's
future. Everything the thread sends back (replies, stream events, notices for the
master) goes through its `Outbox`, which the thread flushes a few times per tick.

The thread body (`_run`): `open()` builds the context (`start()` blocks until then, so
a context that cannot be created fails the backend at start-up, not on the first
request), `serve()` runs until `Shutdown`, `close()` frees everything. If `serve()`
raises, the worker is dead: `fail_all()` ends its waiting and running requests with
`EngineDead`, commands still in its inbox or submitted later are refused with it, and
the master hears `WorkerDied`, which marks the whole engine dead.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from juggler.engine.schedule.messages import (
    Notice,
    Shutdown,
    WorkerCommand,
    WorkerDied,
    reply_of,
)
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.worker.config import WorkerSnapshot
from juggler.errors import EngineDead

log = logging.getLogger(__name__)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class OwnerThread(abc.ABC):
    """Base of `Worker` and `EmbedWorker`: the thread, its inbox and outbox."""

    def __init__(
        self,
        name: str,
        worker_id: int,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Notice], None],
        *,
        kv_total: int,
    ) -> None:
        """`deliver` runs on the event loop: it hands a worker's notice to the master."""
        self.name = f"{name}-{worker_id}"
        self.worker_id = worker_id
        self.loop = loop
        self._deliver = deliver
        self.outbox = Outbox(loop)
        self.snapshot = WorkerSnapshot(kv_total=kv_total)
        self._inbox: queue.SimpleQueue[WorkerCommand] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        #: Guards `_dead` against a command submitted while the thread dies.
        self._lock = threading.Lock()
        self._dead: EngineDead | None = None
        #: When the thread last finished a step (monotonic): a thread that holds work and
        #: has not finished one for long is stuck (issue 27: health tells the truth).
        self.progress_at = time.monotonic()
        #: Whether it holds work now (requests running or waiting); set by the thread.
        self.holds_work = False

    def stuck_for(self, now: float) -> float:
        """Seconds without a finished step while holding work (0 when idle)."""
        return max(0.0, now - self.progress_at) if self.holds_work else 0.0

    # -- any thread ------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread and block until its context exists (raises if it failed)."""
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def submit(self, cmd: WorkerCommand) -> None:
        """Queue a command for the thread; a dead worker refuses it with EngineDead."""
        with self._lock:
            dead = self._dead
            if dead is None:
                if not self.holds_work:  # work arrives: its clock starts now
                    self.progress_at = time.monotonic()
                    self.holds_work = True
                self._inbox.put(cmd)
                return
        reply = reply_of(cmd)
        if reply is not None:
            self.loop.call_soon_threadsafe(_set_exception, reply, dead)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.submit(Shutdown())
        self._thread.join(timeout_s)

    @property
    def dead(self) -> EngineDead | None:
        """Why this worker cannot serve any more (its thread failed), or None."""
        return self._dead

    # -- the owning thread -----------------------------------------------------------
    def notify(self, notice: Notice) -> None:
        """Send a notice (RequestDone, SessionGone, ...) to the master at the next flush."""
        self.outbox.call(self._deliver, notice)

    @abc.abstractmethod
    def open(self) -> None:
        """Build the context (on the owning thread); raising fails `start()`."""

    @abc.abstractmethod
    def serve(self) -> None:
        """Handle commands until `Shutdown`."""

    @abc.abstractmethod
    def close(self) -> None:
        """End what is still running and free the context."""

    @abc.abstractmethod
    def fail_all(self, error: EngineDead) -> None:
        """The thread failed: end every waiting and running request with `error`."""

    def _run(self) -> None:
        try:
            self.open()
        except BaseException as exc:  # reported to start()
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self.serve()
        except Exception as exc:
            log.exception("%s failed; the engine is dead", self.name)
            self._die(EngineDead(f"{self.name} failed ({type(exc).__name__}: {exc})"))
        try:
            self.close()
        except Exception:
            log.exception("%s: closing failed", self.name)
        self.outbox.flush()

    def _die(self, error: EngineDead) -> None:
        with self._lock:
            self._dead = error
            queued: list[WorkerCommand] = []
            while True:
                try:
                    queued.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
        for cmd in queued:
            reply = reply_of(cmd)
            if reply is not None:
                self.outbox.reject(reply, error)
        try:
            self.fail_all(error)
        except Exception:
            log.exception("%s: ending its requests failed", self.name)
        self.notify(WorkerDied(self.worker_id, error))
        self.outbox.flush()
