"""Helper tasks of the owner: the process I/O it must not wait for itself.

Each coroutine runs as its own task, started by the owner (owner.py); it does the slow
part through the Spawner or a process handle (start and health-poll, stop, wait for an
exit, probe) and reports the outcome by posting one message back. None of them reads or
writes the residency table: a started process is handed to the owner in LoadDone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from juggler.errors import JugglerError, LoadFailed
from juggler.manager import messages as m
from juggler.manager.load_queue import LoadJob
from juggler.manager.spawner import BackendProcess, Spawner

log = logging.getLogger("juggler.manager")
Post = Callable[[m.Message], None]

#: How long a backend the router could not reach gets to answer its health check.
PROBE_TIMEOUT_S = 1.0


async def load(
    spawner: Spawner,
    job: LoadJob,
    server_id: int,
    log_path: Path,
    stopping: list[asyncio.Future[None]],
    timeout_s: float,
    post: Post,
    env: Mapping[str, str] | None = None,
) -> None:
    """Wait for the victims' processes to be gone (their memory freed), then start the
    backend (with `env` added to its environment); posts LoadDone with the process or
    the error."""
    process: BackendProcess | None = None
    error: Exception | None = None
    try:
        await asyncio.gather(*stopping)
        process = await spawner.start(job.plan, log_path, timeout_s, env=env)
    except JugglerError as exc:
        error = exc
    except Exception as exc:
        log.exception("manager: unexpected error loading %s", job.model_name)
        error = LoadFailed(f"Loading {job.model_name!r} failed: {exc}")
    post(m.LoadDone(job, server_id, process, error))


async def stop(process: BackendProcess, grace_s: float, server_id: int, post: Post) -> None:
    """Stop a backend; posts EvictDone once it is gone."""
    try:
        await process.stop(grace_s)
    finally:
        post(m.EvictDone(server_id))


async def downsize(process: BackendProcess, server_id: int, timeout_s: float, post: Post) -> None:
    """Ask a backend to free its contexts; posts DownsizeDone with whether it did."""
    is_downsized = False
    try:
        is_downsized = await process.downsize(timeout_s)
    finally:
        post(m.DownsizeDone(server_id, is_downsized))


async def watch(process: BackendProcess, server_id: int, post: Post) -> None:
    """Wait for a ready backend's process to exit; posts Exited."""
    code = await process.wait_exit()
    post(m.Exited(server_id, code))


async def probe(
    spawner: Spawner,
    process: BackendProcess,
    server_id: int,
    post: Post,
    future: asyncio.Future[None] | None = None,
) -> None:
    """Check the health of a backend the router could not reach; posts ProbeFailed when it
    does not answer within PROBE_TIMEOUT_S. `future` is settled here when the backend is
    healthy, else by the owner once it has acted on ProbeFailed."""
    if await spawner.probe(process, PROBE_TIMEOUT_S):
        if future is not None and not future.done():
            future.set_result(None)
        return
    post(m.ProbeFailed(server_id, future))
