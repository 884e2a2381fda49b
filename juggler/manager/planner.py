"""A load's plan and every check it runs, before anything is queued or evicted.

`LoadPlanner.prepare` turns a model's merged options into a `LaunchPlan`
(`recipes.plan_launch`) in the host memory a load can have (issue 52): what is
available now (`fit.available_memory_bytes`) plus what Juggler's own backends hold,
which evicting them would free (their VmRSS); and with the GPUs it may use (issue 48,
`gpu_view`): the backends the llama.cpp library has and the machine runs, and the VRAM
free now plus what Juggler's unpinned backends hold there. `check` runs the same checks
for options that are only saved (the per-model options API), so that what is saved is
what a load takes. Reads /proc, NVML and the checkpoint's header in a thread, never on
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from juggler.accel.detect import device_present
from juggler.accel.library import library_dir, loaded_backends
from juggler.config import Settings
from juggler.errors import CheckpointMissing
from juggler.manager import auto_ctx
from juggler.manager.fit import available_memory_bytes
from juggler.manager.llamacpp import GpuView
from juggler.manager.memory import process_rss
from juggler.manager.recipes import LaunchPlan, Resolver, plan_launch
from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.manager.vram import VramReader, held_bytes
from juggler.options import AUTO_CTX, ModelOptions
from juggler.types import ModelInfo


class Models(Protocol):
    """The registry as the planner reads it (`Manager.registry`)."""

    def get(self, name: str) -> ModelInfo: ...


def _default_resolver() -> Resolver:
    from juggler.registry.checkpoint import resolve_checkpoint

    return resolve_checkpoint


def load_memory_bytes(pids: Iterable[int]) -> int | None:
    """The host memory a load can have: what is available now plus what the processes
    `pids` (Juggler's backends) hold. Reads /proc; blocks briefly."""
    available = available_memory_bytes()
    if available is None:
        return None
    held = (process_rss(pid) for pid in pids)
    return available + sum(n for n in held if n is not None)


#: GPU backends the llama.cpp library has, and of those the ones the machine can run.
Backends = tuple[frozenset[str], frozenset[str]]


def machine_backends() -> Backends:
    """This machine's `Backends` (`accel`: the library's files, NVML and /dev)."""
    built = loaded_backends()
    return built, frozenset(b for b in built if device_present(b))


def gpu_view(
    reader: VramReader, servers: Iterable[ServerSnapshot], backends: Backends | None = None
) -> GpuView:
    """The GPUs a load may use now (see the module doc; `backends`: this machine's when
    None). Reads files and NVML; blocks briefly."""
    built, present = backends if backends is not None else machine_backends()
    sample, per_pid = reader.read()
    vram: int | None = None
    if sample is not None:
        held = sum(
            held_bytes(s.gpu, s.pid, per_pid)
            for s in servers
            if s.status is ServerState.READY and not s.pinned
        )
        vram = max(0, sample.total_bytes - sample.used_bytes) + held
    return GpuView(built, present, vram, str(library_dir() or "llama_cpp/lib"))


class LoadPlanner:
    def __init__(
        self,
        settings: Callable[[], Settings],
        registry: Models,
        resolve: Resolver | None,
        backend_pids: Callable[[], Sequence[int]],
        gpu: Callable[[], GpuView] = GpuView,
    ) -> None:
        """`settings`, `backend_pids` and `gpu` are read at each call (all change; `gpu`
        blocks briefly: it runs in a thread)."""
        self._settings = settings
        self._registry = registry
        self._resolve = resolve
        self._pids = backend_pids
        self._gpu = gpu

    async def prepare(self, model: str | ModelInfo, options: ModelOptions) -> LaunchPlan:
        """The plan of a load of `model` (a name, or a model not registered yet); raises
        what `plan_launch` raises (BadRequest names the option, CheckpointMissing /
        RecipeNotInstalled, Forbidden) and ModelNotFound."""
        info = self._registry.get(model) if isinstance(model, str) else model
        resolve = self._resolve or _default_resolver()
        memory = await asyncio.to_thread(load_memory_bytes, self._pids())
        gpu = await asyncio.to_thread(self._gpu) if info.recipe == "llamacpp" else None
        return await asyncio.to_thread(
            plan_launch, info, options, self._settings(), resolve, memory_bytes=memory, gpu=gpu
        )

    async def check(self, model: str | ModelInfo, options: ModelOptions) -> None:
        """A load's checks on `options` without loading anything: BadRequest names the
        value. A checkpoint not on disk yet, or a recipe not installed, is no reason to
        refuse to save options."""
        with contextlib.suppress(CheckpointMissing):
            await self.prepare(model, options)

    async def resolved_ctx_size(self, model_name: str, options: ModelOptions) -> int:
        """lemonade.md's `resolved_ctx_size`: "The context size a load right now would
        use: the effective `ctx_size`, or the automatically computed size when that is
        `-1`" (`auto_ctx`). Reads the checkpoint's header when it is on disk; never
        loads anything. Raises ModelNotFound."""
        if options.ctx_size != AUTO_CTX:
            return options.ctx_size
        info = self._registry.get(model_name)
        resolve = self._resolve or _default_resolver()
        memory = await asyncio.to_thread(load_memory_bytes, self._pids())
        return await asyncio.to_thread(
            auto_ctx.planned_size, info, options, self._settings(), resolve, memory_bytes=memory
        )
