"""OpenMP's thread pools, as llama.cpp's CPU backend uses them (issue 47).

ggml's CPU backend (built with OpenMP, as llama-cpp-python builds it) decodes with
`n > 1` threads in an OpenMP parallel region. libgomp keeps one pool of helper threads
per thread that opens regions, so each engine worker has its own pool, and the pool's
threads stay counted after the region ends. libgomp lets a helper spin a few
milliseconds for the next region, which is what keeps a stream's decodes back to back;
but once it counts more threads than the machine has cores, every helper spins only a
hundred times and then sleeps, and each decode waits for the kernel to wake it again.

Measured on 2 cores (SmolLM2-135M, one stream, 128 tokens a request): one worker 103-121
tok/s; two workers whose lone streams took turns on both workers' pools 72-86 tok/s;
one worker with `OMP_WAIT_POLICY=PASSIVE` (helpers always sleep) 46-55. So a worker can
give its pool back (`release_pool`, OpenMP 5.0's `omp_pause_resource_all`, on the
worker's own thread); when it does is `engine.threads`' call.
"""

from __future__ import annotations

import ctypes
import functools
import os

#: OpenMP's `omp_pause_soft`: the pool's threads end; the next region starts new ones.
OMP_PAUSE_SOFT = 1


@functools.cache
def _libgomp() -> ctypes.CDLL | None:
    """libgomp if this process already loaded it (llama.cpp's CPU backend did), else
    None: a build without OpenMP has no pools to give back."""
    try:
        lib = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        fn = lib.omp_pause_resource_all
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return lib


def release_pool() -> bool:
    """End the OpenMP helper threads of the calling thread's pool (call it on a worker
    thread that has no decode running). True when libgomp took it."""
    lib = _libgomp()
    if lib is None:
        return False
    return int(lib.omp_pause_resource_all(OMP_PAUSE_SOFT)) == 0
