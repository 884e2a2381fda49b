"""The machine's cores as this process sees them, and moving a process onto some."""

from __future__ import annotations

import os


def allowed_cpus() -> tuple[int, ...]:
    """The cores this process may run on (its affinity, else all)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def pin_process(cpus: tuple[int, ...]) -> None:
    """Move every thread of this process onto `cpus` (Linux; elsewhere a no-op)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended meanwhile, or a CPU went offline
            continue
