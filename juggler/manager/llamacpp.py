"""A llama.cpp load's shape: its backend, engine flags, layers on the GPU and every check,
before anything is queued or evicted (`place`, for `recipes.plan_launch`).

Issue 48, in the order `place` applies it:

- "A load asking for a GPU backend the library does not have is a 400 naming
  `llamacpp_backend`, not a silent CPU load" (`check_backend`): the backend must be built
  into the llama.cpp library the backends load, and the machine must have its device.
  Layers on the GPU (`n_gpu_layers` above 0) need a GPU backend.
- The context and the KV cells are two settings: `ctx_size` is what one sequence may hold
  (checked against the trained context by `fit.check_fit`), `kv_cells` the cells of one
  worker, shared by its sequences; a worker must hold one whole sequence, so `kv_cells`
  is at least `ctx_size` (0: as `ctx_size`, as before).
- Layers: `n_gpu_layers` as given, or automatic: as many as fit in the VRAM the load
  can have (`offload.plan_offload`; `GpuView.vram_bytes`: free now plus what Juggler's
  unpinned backends hold, which the residency policy evicts for it). An explicit count
  that cannot fit is a 400 naming `n_gpu_layers`. Nothing offloaded: the load is a CPU
  load (device cpu).
- Workers: automatic ones (0) are two for a small or fully offloaded text model
  (`compute.workers`); a partly offloaded one, or one where two do not fit in VRAM or
  host memory but one does, gets one.
- Host memory: `fit.check_fit` on what stays in host memory.

Pure apart from `read_gpu_view`'s callers: everything machine-specific comes in
`memory_bytes` and the `GpuView`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from juggler.compute.cpus import allowed_cpus
from juggler.compute.workers import workers_for
from juggler.config import Settings
from juggler.engine_args import parse_llamacpp_args
from juggler.errors import BadRequest
from juggler.manager import auto_ctx
from juggler.manager.fit import check_fit, check_threads, estimate
from juggler.manager.offload import ALL_LAYERS, Offload, plan_offload
from juggler.options import EngineFlags, ModelOptions
from juggler.registry.gguf_meta import GgufInfo
from juggler.types import Device, ModelInfo, ModelType

ENGINE_MODULE = "juggler.engine"
GIB = 1 << 30


@dataclass(frozen=True)
class GpuView:
    """What a load may use of the machine's GPUs."""

    #: GPU backends the llama.cpp library has (`accel.library`).
    built: frozenset[str] = frozenset()
    #: Of those, the ones this machine has a device for (`accel.detect`).
    present: frozenset[str] = frozenset()
    #: VRAM a load can have: free now plus what Juggler's unpinned backends hold; None
    #: where no source measures the GPU's memory (then every layer is offloaded).
    vram_bytes: int | None = None
    #: Where the library is, for messages.
    library: str = "llama_cpp/lib"


@dataclass(frozen=True)
class Placement:
    """What `place` decided for one load."""

    options: ModelOptions
    flags: EngineFlags
    device: Device
    offload: Offload | None


def check_backend(options: ModelOptions, gpu: GpuView) -> None:
    """BadRequest naming `llamacpp_backend` for a GPU backend the library lacks or the
    machine has no device for, or `n_gpu_layers` for layers on the CPU backend."""
    backend = options.llamacpp_backend
    if backend == "cpu":
        if options.n_gpu_layers > 0:
            raise BadRequest(
                f"n_gpu_layers {options.n_gpu_layers} needs a GPU llamacpp_backend (cuda, rocm, "
                "vulkan or metal); llamacpp_backend is cpu",
                param="n_gpu_layers",
            )
        return
    has = ", ".join(["cpu", *sorted(gpu.built)])
    if backend not in gpu.built:
        raise BadRequest(
            f"llamacpp_backend {backend}: the llama.cpp library Juggler loads ({gpu.library}) "
            f"was built without {backend} (it has {has}); install for it with "
            f"`JUGGLER_LLAMA_BACKEND={backend} make install`, or use llamacpp_backend cpu",
            param="llamacpp_backend",
        )
    if backend not in gpu.present:
        raise BadRequest(
            f"llamacpp_backend {backend}: llama.cpp was built with {backend}, but this machine "
            f"has no device for it; use llamacpp_backend cpu",
            param="llamacpp_backend",
        )


def _check_cells(options: ModelOptions) -> None:
    if options.kv_cells and options.kv_cells < options.ctx_size:
        raise BadRequest(
            f"kv_cells {options.kv_cells} is fewer than ctx_size {options.ctx_size}: a worker's "
            "cells must hold one whole sequence; use kv_cells of at least ctx_size, or 0 (as "
            "ctx_size)",
            param="kv_cells",
        )


def engine_flags(
    options: ModelOptions,
    settings: Settings,
    header: GgufInfo | None,
    info: ModelInfo,
    *,
    offloaded: bool,
) -> EngineFlags:
    """The backend's engine flags. A client's `llamacpp_args` override the settings'
    workers, parallel and threads; automatic workers (0) are resolved here, so that the
    fit check counts them (`compute.workers`, as the backend would)."""
    shape: dict[str, object] = {
        "ctx_size": options.ctx_size,
        "kv_cells": options.kv_cells,
        "workers": settings.workers,
        "parallel": settings.parallel,
        "threads": settings.threads,
        "n_gpu_layers": ALL_LAYERS if offloaded else 0,
        "cache_type_k": options.cache_type_k,
        "cache_type_v": options.cache_type_v,
    }
    shape.update(parse_llamacpp_args(options.llamacpp_args))
    flags = EngineFlags.model_validate(shape)
    workers = workers_for(
        flags.workers,
        header.size_bytes if header is not None else None,
        is_llm=info.type is ModelType.LLM,
        offloaded=offloaded,
        cores=len(allowed_cpus()),
    )
    return flags.model_copy(update={"workers": workers})


def _layers(
    header: GgufInfo, flags: EngineFlags, info: ModelInfo, options: ModelOptions, gpu: GpuView
) -> Offload:
    """The offload of `flags`' workers; BadRequest naming `n_gpu_layers` when an explicit
    count cannot fit in the VRAM."""
    fp = estimate(header, flags, info.type)
    off = plan_offload(header, fp, options.n_gpu_layers, gpu.vram_bytes)
    vram = gpu.vram_bytes
    if options.n_gpu_layers > 0 and vram is not None and off.vram_bytes > vram:
        raise BadRequest(
            f"n_gpu_layers {options.n_gpu_layers}: those layers, their KV cache and "
            f"{flags.workers} worker(s)' compute buffers need about {off.vram_bytes / GIB:.1f} "
            f"GiB of GPU memory, and {vram / GIB:.1f} GiB is free even after evicting "
            "Juggler's other models; offload fewer layers, or -1 for as many as fit",
            param="n_gpu_layers",
        )
    return off


def _offload(
    header: GgufInfo | None,
    flags: EngineFlags,
    info: ModelInfo,
    options: ModelOptions,
    gpu: GpuView,
    auto_workers: bool,
) -> tuple[EngineFlags, Offload | None]:
    """Layers for a GPU load, and the workers they leave room for (see the module doc)."""
    if header is None:  # not GGUF: the engine refuses it, or takes what it is given
        layers = options.n_gpu_layers if options.n_gpu_layers >= 0 else ALL_LAYERS
        return flags.model_copy(update={"n_gpu_layers": layers}), None
    try:
        off = _layers(header, flags, info, options, gpu)
    except BadRequest:
        if not auto_workers or flags.workers == 1:
            raise
        off = None
    if auto_workers and flags.workers > 1 and (off is None or not off.is_full):
        one = flags.model_copy(update={"workers": 1})
        off_one = _layers(header, one, info, options, gpu)
        if off is None or off_one.num_offloaded >= off.num_offloaded:
            flags, off = one, off_one
    assert off is not None
    return flags.model_copy(update={"n_gpu_layers": off.n_gpu_layers}), off


def place(
    info: ModelInfo,
    options: ModelOptions,
    settings: Settings,
    header: GgufInfo | None,
    *,
    memory_bytes: int | None,
    gpu: GpuView,
) -> Placement:
    """The checks and the shape of a llama.cpp load (see the module doc). Raises
    BadRequest naming the option that cannot work."""
    check_backend(options, gpu)
    on_gpu = options.llamacpp_backend != "cpu" and options.n_gpu_layers != 0
    host = memory_bytes if not on_gpu else None
    sized = auto_ctx.resolved(options, header, settings, memory_bytes=host)
    _check_cells(sized)
    flags = engine_flags(sized, settings, header, info, offloaded=on_gpu)
    auto_workers = auto_ctx.requested_workers(sized, settings) == 0
    off: Offload | None = None
    if on_gpu:
        flags, off = _offload(header, flags, info, sized, gpu, auto_workers)
    check_threads(flags, len(allowed_cpus()))
    if header is not None:
        try:
            check_fit(header, flags, info.type, memory_bytes=memory_bytes, offload=off)
        except BadRequest:
            if flags.workers == 1 or not auto_workers:
                raise
            # Automatic workers: one context where a second would not fit.
            flags = flags.model_copy(update={"workers": 1})
            if on_gpu:
                flags, off = _offload(header, flags, info, sized, gpu, False)
            check_fit(header, flags, info.type, memory_bytes=memory_bytes, offload=off)
    offloaded = flags.n_gpu_layers > 0
    return Placement(sized, flags, Device.GPU if offloaded else Device.CPU, off)


def llamacpp_argv(info: ModelInfo, flags: EngineFlags) -> list[str]:
    """`python -m juggler.engine`: the identity flags, then the engine flags."""
    argv = flags.to_argv()
    if "--threads" in argv and argv[argv.index("--threads") + 1] == "0":
        # 0 means "every core", which is the engine's own default: leave it to the engine.
        i = argv.index("--threads")
        del argv[i : i + 2]
    identity = [
        sys.executable,
        "-m",
        ENGINE_MODULE,
        "--model-path",
        "{model_path}",
        "--model-name",
        "{model_name}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--type",
        info.type.value,
    ]
    # Braces must survive the per-token format() in LaunchPlan.argv.
    return identity + [a.replace("{", "{{").replace("}", "}}") for a in argv]


def explicit_threads(options: ModelOptions, settings: Settings) -> int:
    """Threads per worker set by the admin or the load (0: left to the compute plan)."""
    threads = parse_llamacpp_args(options.llamacpp_args).get("threads", settings.threads)
    return int(threads)
