"""Helper tasks of the owner: the process I/O it must not wait for itself.

Each coroutine runs as its own task, started by the owner (owner.py); it does the slow
part (spawn and health-poll, SIGTERM and reap, wait for an exit, probe) and reports the
outcome by posting one message back. None of them reads or writes the residency table.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx

from juggler.errors import JugglerError, LoadFailed
from juggler.manager import messages as m
from juggler.manager.wrapped import WrappedServer

log = logging.getLogger("juggler.manager")
Post = Callable[[m.Message], None]

#: How long a backend the router could not reach gets to answer its health check.
PROBE_TIMEOUT_S = 1.0


async def load(
    job: m.LoadJob,
    server: WrappedServer,
    stopping: list[asyncio.Future[None]],
    timeout_s: float,
    post: Post,
) -> None:
    """Wait for the victims' processes to be gone (their memory freed), then start
    `server`; posts LoadDone with the error, if any."""
    error: Exception | None = None
    try:
        await asyncio.gather(*stopping)
        await server.start(timeout_s)
    except JugglerError as exc:
        error = exc
    except Exception as exc:
        log.exception("manager: unexpected error loading %s", job.model_name)
        error = LoadFailed(f"Loading {job.model_name!r} failed: {exc}")
    post(m.LoadDone(job, server.server_id, error))


async def stop_server(server: WrappedServer, post: Post) -> None:
    """Stop the process group; posts EvictDone once it is gone."""
    try:
        await server.stop(server.stop_grace_s)
    finally:
        post(m.EvictDone(server.server_id))


async def watch(server: WrappedServer, post: Post) -> None:
    """Wait for a ready backend's process to exit; posts Exited."""
    code = await server.wait_exit()
    post(m.Exited(server.server_id, code))


async def probe(
    server: WrappedServer, post: Post, future: asyncio.Future[None] | None = None
) -> None:
    """Check the health of a backend the router could not reach; posts ProbeFailed when it
    does not answer 200 within PROBE_TIMEOUT_S. `future` is settled here when the backend
    is healthy, else by the owner once it has acted on ProbeFailed."""
    url = server.backend_url + server.plan.health_path
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=PROBE_TIMEOUT_S) as client:
            response = await client.get(url)
        if response.status_code == 200:
            if future is not None and not future.done():
                future.set_result(None)
            return
    except httpx.HTTPError:
        pass
    post(m.ProbeFailed(server.server_id, future))
