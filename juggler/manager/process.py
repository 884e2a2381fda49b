"""The production Spawner: each backend is a child process in its own process group.

A backend dies with the router (PR_SET_PDEATHSIG on Linux, so even a SIGKILLed router
leaves no model holding memory), writes stdout and stderr into one pipe that the router
reads (output.py: to one log file per load and to the LogBook under the model's name),
and counts as started when its health check answers 200 (polled with backoff). Stopping it
is SIGTERM to the group, then SIGKILL after a grace period. Everything here runs in the
owner's helper tasks; nothing here reads or writes the residency table.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from juggler.backend_key import ENV as KEY_ENV
from juggler.backend_key import HEADER as KEY_HEADER
from juggler.backend_key import BackendKeys, new_key
from juggler.engine.adapter_paths import ENV as BOOK_ENV
from juggler.errors import LoadFailed, RecipeNotInstalled
from juggler.logbook import LogBook
from juggler.manager.child_env import child_env
from juggler.manager.output import OutputPump
from juggler.manager.recipes import LaunchPlan, require_file
from juggler.manager.spawner import STOP_GRACE_S, BackendProcess
from juggler.manager.vram import GpuUse
from juggler.registry.adapters import AdapterBook
from juggler.types import Device

HOST = "127.0.0.1"
log = logging.getLogger("juggler.manager")


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


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ProcessHandle:
    """One backend child process (a `BackendProcess`)."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        port: int,
        health_path: str,
        log_path: Path,
        output: OutputPump,
        key: str | None = None,
    ) -> None:
        self.process = process
        #: The backend's key (issue 27): sent on the handle's own calls to it.
        self.headers = {KEY_HEADER: key} if key else {}
        self.output = output
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.health_url = self.url + health_path
        self.pid: int | None = process.pid
        self.device = Device.NONE
        self.load_duration_s = 0.0
        self.downsizable_bytes = 0
        self.gpu = GpuUse()
        self.log_path = log_path
        #: Called once the process is gone (forgets its key).
        self.on_stop: Callable[[], None] = lambda: None

    @property
    def is_alive(self) -> bool:
        return self.process.returncode is None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def wait_exit(self) -> int:
        return await self.process.wait()

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns once the
        process is reaped."""
        if self.process.returncode is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), grace_s)
            except TimeoutError:
                _signal_group(self.process.pid, signal.SIGKILL)
                await self.process.wait()
        self.kill_now()  # children of a `command` backend may outlive their leader
        self.on_stop()
        await self.output.drain(timeout_s=1.0)

    async def downsize(self, timeout_s: float) -> bool:
        if not self.downsizable_bytes:
            return False
        try:
            async with httpx.AsyncClient(
                trust_env=False, timeout=timeout_s, headers=self.headers
            ) as client:
                response = await client.post(self.url + "/internal/downsize")
            body = response.json()
            if response.status_code == 200 and body.get("downsized") is True:
                # Issue 48: "downsize frees VRAM, and says how much".
                log.info(
                    "downsize of %s freed %d MiB of host memory and %d MiB of VRAM",
                    self.url,
                    int(body.get("context_bytes", 0)) >> 20,
                    int(body.get("vram_bytes", 0)) >> 20,
                )
                return True
            return False
        except (httpx.HTTPError, ValueError, AttributeError, TypeError):
            return False

    def kill_now(self) -> None:
        _signal_group(self.process.pid, signal.SIGKILL)

    def log_tail(self, max_chars: int = 2000) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_chars))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""


class ProcessSpawner:
    """Starts backends as child processes (the `Spawner` of production); their output
    goes to `logbook` too when one is given."""

    def __init__(self, logbook: LogBook | None = None) -> None:
        self.logbook = logbook
        #: Each running llama.cpp backend's key, for the router's clients (`BackendAuth`).
        self.keys = BackendKeys()

    async def start(
        self,
        plan: LaunchPlan,
        log_path: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> BackendProcess:
        """Spawn the process in its own process group and wait until its health check
        answers 200. Blocks (awaits) up to `timeout_s`. Raises CheckpointMissing /
        RecipeNotInstalled (missing-file class) or LoadFailed (with the log's tail); on
        any failure or cancellation the process group is killed first."""
        started = time.monotonic()
        require_file(plan)
        port = free_port()
        argv = plan.argv(port, HOST)
        key = new_key() if plan.reports_device else None  # Juggler's own engine checks it
        env = {**(env or {}), **({KEY_ENV: key, BOOK_ENV: str(AdapterBook().file)} if key else {})}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        output = OutputPump(read_fd, log_path, plan.info.name, self.logbook)
        spawned = False
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=child_env(env),
                preexec_fn=_die_with_parent if _LIBC is not None else None,
            )
            spawned = True
        except (FileNotFoundError, PermissionError) as exc:
            raise RecipeNotInstalled(f"Cannot start {argv[0]!r}: {exc}") from exc
        finally:
            os.close(write_fd)  # the child holds its copy: EOF comes when it is gone
            if not spawned:
                await output.drain(0)  # closes the read end
        output.start()
        if self.logbook is not None:
            self.logbook.append(
                plan.info.name, f"[juggler] backend started: pid {process.pid}, port {port}"
            )
        handle = ProcessHandle(process, port, plan.health_path, log_path, output, key)
        if key:
            self.keys.add(handle.url, key)
            handle.on_stop = lambda: self.keys.remove(handle.url)
        try:
            body = await _wait_healthy(handle, plan.info.name, started + timeout_s)
        except BaseException:
            await handle.stop(grace_s=1.0)
            raise
        reported = _reported_device(body) if plan.reports_device else None
        handle.device = reported or plan.device
        handle.downsizable_bytes = _downsizable_bytes(body) if plan.reports_device else 0
        handle.gpu = _gpu_use(body) if plan.reports_device else GpuUse()
        handle.load_duration_s = time.monotonic() - started
        return handle

    async def probe(self, process: BackendProcess, timeout_s: float) -> bool:
        try:
            headers = getattr(process, "headers", {})
            async with httpx.AsyncClient(
                trust_env=False, timeout=timeout_s, headers=headers
            ) as client:
                response = await client.get(process.health_url)
            return response.status_code == 200
        except httpx.HTTPError:
            return False


async def _wait_healthy(handle: ProcessHandle, name: str, deadline: float) -> bytes:
    """Poll the health URL with backoff until it answers 200 (returns the body); raises
    LoadFailed when the process exits first or `deadline` (monotonic) passes."""
    exited = asyncio.ensure_future(handle.process.wait())
    timeout_s = deadline - time.monotonic()
    delay = 0.02
    try:
        async with httpx.AsyncClient(
            trust_env=False, timeout=2.0, headers=handle.headers
        ) as client:
            while True:
                if exited.done():
                    await handle.output.settle(timeout_s=1.0)  # its last words, into the file
                    raise LoadFailed(
                        f"Backend for {name!r} exited with code {exited.result()} while "
                        f"loading: {handle.log_tail() or '(no output)'}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(handle.health_url)
                    if response.status_code == 200:
                        return response.content
                if time.monotonic() >= deadline:
                    raise LoadFailed(
                        f"Backend for {name!r} did not become healthy within "
                        f"{timeout_s:.0f}s: {handle.log_tail() or '(no output)'}"
                    )
                await asyncio.wait({exited}, timeout=delay)
                delay = min(delay * 2, 0.25)
    finally:
        exited.cancel()


def _downsizable_bytes(body: bytes) -> int:
    """What a llamacpp backend says a downsize frees (its /health `memory`)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        memory = json.loads(body).get("memory") or {}
        return max(0, int(memory.get("context_bytes", 0)))
    return 0


def _gpu_use(body: bytes) -> GpuUse:
    """What a llamacpp backend says llama.cpp placed on the GPU (its /health)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return GpuUse.from_health(json.loads(body))
    return GpuUse()


def _reported_device(body: bytes) -> Device | None:
    """The `device` a llamacpp backend reports on /health ("cpu", "gpu"), if any."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        reported = json.loads(body).get("device")
        if isinstance(reported, str):
            return Device.parse(reported) or None
    return None
