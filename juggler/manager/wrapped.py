"""One WrappedServer: one backend child process, its URL, type, device, pin, last use,
requests in flight and lifecycle state.

The owner task (manager.py) holds every WrappedServer and is the only writer of their
fields. The coroutines here (`start`, `stop`, `wait_exit`) do the process I/O; the owner
runs them in helper tasks and is told the outcome by message.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from juggler.errors import LoadFailed, RecipeNotInstalled
from juggler.manager.recipes import LaunchPlan, require_file
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.types import Device

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()  # loaded here: the forked child must only make the call
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: if the router dies (even by SIGKILL), the
    kernel kills the backend, so no model is left holding memory."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class WrappedServer:
    """A backend process for one model. Fields are written by the owner task only."""

    def __init__(self, server_id: int, plan: LaunchPlan, log_dir: Path, num_loads: int) -> None:
        self.server_id = server_id
        self.plan = plan
        self.model_name = plan.info.name
        self.type = plan.model_type
        self.device: Device = plan.device
        self.pinned = plan.options.pinned
        self.options = plan.options
        self.state = ServerState.LOADING
        self.last_use = time.time()
        self.in_flight = 0
        self.num_loads = num_loads
        self.port = 0
        self.process: asyncio.subprocess.Process | None = None
        self.load_duration_s: float | None = None
        #: SIGTERM -> SIGKILL grace on eviction; short for a backend that stopped answering.
        self.stop_grace_s = STOP_GRACE_S
        #: Set by the owner when it starts the task that stops this process.
        self.is_stopping = False
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.model_name)
        self.log_path = log_dir / f"{safe}-{server_id}.log"

    @property
    def backend_url(self) -> str:
        return f"http://{HOST}:{self.port}" if self.port else ""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def is_alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def snapshot(self) -> ServerSnapshot:
        return ServerSnapshot(
            model_name=self.model_name,
            checkpoint=self.plan.info.checkpoint,
            type=self.type,
            device=self.device,
            recipe=self.plan.recipe.name,
            backend_url=self.backend_url,
            pid=self.pid,
            last_use=self.last_use,
            pinned=self.pinned,
            status=self.state,
            in_flight=self.in_flight,
            options=self.options,
            num_loads=self.num_loads,
            load_duration_s=self.load_duration_s,
        )

    def log_tail(self, max_chars: int = 2000) -> str:
        """The end of the backend's stdout+stderr, to explain a failed load."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_chars))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    async def start(self, timeout_s: float) -> None:
        """Spawn the process in its own process group and wait until its health check
        answers 200. Blocks (awaits) up to `timeout_s`. Raises CheckpointMissing /
        RecipeNotInstalled (missing-file class) or LoadFailed (with the log's tail); on
        any failure or cancellation the process group is killed first."""
        started = time.monotonic()
        require_file(self.plan)
        self.port = free_port()
        argv = self.plan.argv(self.port, HOST)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if _LIBC is not None else None,
                )
            except (FileNotFoundError, PermissionError) as exc:
                raise RecipeNotInstalled(f"Cannot start {argv[0]!r}: {exc}") from exc
        try:
            await self._wait_healthy(started + timeout_s - time.monotonic())
        except BaseException:
            await self.stop(grace_s=1.0)
            raise
        self.load_duration_s = time.monotonic() - started

    async def _wait_healthy(self, timeout_s: float) -> None:
        assert self.process is not None
        url = self.backend_url + self.plan.health_path
        exited = asyncio.ensure_future(self.process.wait())
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=2.0) as client:
                while True:
                    if exited.done():
                        tail = self.log_tail()
                        raise LoadFailed(
                            f"Backend for {self.model_name!r} exited with code "
                            f"{exited.result()} while loading: {tail or '(no output)'}"
                        )
                    with contextlib.suppress(httpx.HTTPError):
                        response = await client.get(url)
                        if response.status_code == 200:
                            self._read_device(response.content)
                            return
                    if time.monotonic() >= deadline:
                        raise LoadFailed(
                            f"Backend for {self.model_name!r} did not become healthy within "
                            f"{timeout_s:.0f}s: {self.log_tail() or '(no output)'}"
                        )
                    await asyncio.wait({exited}, timeout=delay)
                    delay = min(delay * 2, 0.25)
        finally:
            exited.cancel()

    def _read_device(self, body: bytes) -> None:
        if not self.plan.reports_device:
            return
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            reported = json.loads(body).get("device")
            if isinstance(reported, str):
                self.device = Device.parse(reported) or self.device

    async def wait_exit(self) -> int:
        """Blocks until the process exits; returns its exit code."""
        assert self.process is not None
        return await self.process.wait()

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns once the
        process is reaped. Safe to call twice or on a process that already exited."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), grace_s)
            except TimeoutError:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        # Children of a `command` backend may outlive their leader.
        _signal_group(process.pid, signal.SIGKILL)

    def kill_now(self) -> None:
        """Synchronous last resort (interpreter shutdown): SIGKILL the group."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
