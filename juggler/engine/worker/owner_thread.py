"""The thread plumbing shared by every engine worker (generation and embedding).

A worker is one thread that alone owns one llama context. Others talk to it only through
`submit(Command)` (a thread-safe inbox the thread drains) and get answers on each
command's future. Everything the thread sends back (replies, stream events, notices for
the master) goes through its `Outbox`, which the thread flushes a few times per tick. `start()` blocks until the thread has built its context, so a context
that cannot be created fails the backend at start-up, not on the first request.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

from juggler.engine.llama.native import Model
from juggler.engine.schedule.messages import Command, CommandKind
from juggler.engine.schedule.outbox import Outbox
from juggler.engine.worker.config import WorkerConfig, WorkerSnapshot


class OwnerThread:
    """Base of Worker and EmbedWorker. Subclasses implement `_run` (the thread body),
    which must call `_started(error)` exactly once after building its context."""

    def __init__(
        self,
        name: str,
        worker_id: int,
        model: Model,
        config: WorkerConfig,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Command], None],
    ) -> None:
        """`deliver` runs on the event loop: it hands a worker's notice to the master."""
        self.worker_id = worker_id
        self.model = model
        self.config = config
        self.loop = loop
        self._deliver = deliver
        self.outbox = Outbox(loop)
        self.n_ctx = config.n_ctx
        self.snapshot = WorkerSnapshot(kv_total=config.n_ctx)
        self._inbox: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"{name}-{worker_id}", daemon=True)
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    # -- any thread ------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread and block until its context exists (raises if it failed)."""
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def submit(self, cmd: Command) -> None:
        self._inbox.put(cmd)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._inbox.put(Command(CommandKind.SHUTDOWN))
        self._thread.join(timeout_s)

    # -- the owning thread -----------------------------------------------------------
    def notify(self, cmd: Command) -> None:
        """Send a notice (REQUEST_DONE, SESSION_GONE) to the master at the next flush."""
        self.outbox.call(self._deliver, cmd)

    def _started(self, error: BaseException | None = None) -> None:
        self._start_error = error
        self._ready.set()

    def _run(self) -> None:
        raise NotImplementedError
