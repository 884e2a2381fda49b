"""The compute plan as a pure function: busy backends and the machine's cores -> shares.

ggml's threads wait for each other at every operation, so two busy backends that each
run one thread per core put twice as many spinning threads as there are cores on the
machine, and each decode step waits on a thread that the kernel descheduled. The plan
keeps the threads of all busy backends at most equal to the cores and gives each its own
cores:

- nothing busy: every backend may use every core (the next one to get work starts with
  all of them, so a lone model loses nothing);
- one busy backend: all cores;
- k busy backends on P >= k cores: the cores are divided in proportion to their weights
  (at least one each, largest remainder), each share a disjoint range of cores;
- more busy backends than cores: whole cores cannot be divided, so each gets one thread
  on the common cores and the kernel divides time between them (one thread has no
  barrier to wait at, so sharing a core costs nothing but the time itself);
- a backend whose `threads` was set explicitly is outside the division: it keeps its
  thread count, and while it is busy the others divide the cores it leaves (at least one).
  Its threads are not pinned; the kernel moves them to the cores the others leave free.
- an idle backend beside busy ones gets one thread (what it does then is upkeep);
- a backend with every layer on the GPU (issue 48: "a fully offloaded model gets the few
  CPU threads it needs, a partially offloaded one is divided like a CPU model") gets
  `OFFLOADED_THREADS` llama.cpp threads (one per busy worker at least: its decodes run on
  the GPU, the CPU only launches them); while busy it reserves one core of its own from
  the end of the pool (its worker threads and the host side of its tokens run there), and
  the CPU models divide the rest. Several fully offloaded models on one GPU each reserve
  a core while busy (never the last one of the pool; past that they share it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Consumer:
    """One backend as the plan sees it."""

    key: int
    busy: bool
    #: Share of the cores against other busy backends (equal weights: equal shares).
    weight: float = 1.0
    #: Threads given explicitly (a model's `--threads`); 0: the plan decides.
    fixed_threads: int = 0
    #: Every layer is on the GPU (the CPU only launches its decodes).
    offloaded: bool = False


@dataclass(frozen=True)
class Share:
    """What one backend may use now: `threads` llama.cpp threads in all (divided among its
    busy workers), running on `cpus`."""

    threads: int
    cpus: tuple[int, ...]
    busy: bool = False
    #: True when the backend is outside the division (explicit threads, or plan off).
    fixed: bool = False
    #: A fully offloaded backend's share (the few threads it needs).
    gpu: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "threads": self.threads,
            "cpus": list(self.cpus),
            "busy": self.busy,
            "planned": not self.fixed,
            "gpu": self.gpu,
        }


#: llama.cpp threads a fully offloaded backend gets (split among its busy workers, one
#: each at least: `split_threads`).
OFFLOADED_THREADS = 1


def divide(total: int, weights: Sequence[float]) -> list[int]:
    """`total` units in proportion to `weights`, at least one each (needs total >=
    len(weights)); largest remainder, ties to the earlier one."""
    n = len(weights)
    if n == 0:
        return []
    if total < n:
        raise ValueError(f"cannot give {n} consumers at least one of {total}")
    spare = total - n
    w = [max(x, 1e-9) for x in weights]
    exact = [spare * x / sum(w) for x in w]
    counts = [1 + int(e) for e in exact]
    left = total - sum(counts)
    order = sorted(range(n), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in order[:left]:
        counts[i] += 1
    return counts


def plan_shares(
    consumers: Iterable[Consumer], cpus: Sequence[int], *, enabled: bool = True
) -> dict[int, Share]:
    """Each consumer's share of `cpus` (the cores the server may use)."""
    every = tuple(sorted(cpus)) or (0,)
    people = sorted(consumers, key=lambda c: c.key)
    shares: dict[int, Share] = {}
    if not enabled:
        for c in people:
            shares[c.key] = Share(c.fixed_threads or len(every), every, c.busy, fixed=True)
        return shares
    fixed = [c for c in people if c.fixed_threads > 0]
    gpu = [c for c in people if c.fixed_threads <= 0 and c.offloaded]
    planned = [c for c in people if c.fixed_threads <= 0 and not c.offloaded]
    for c in fixed:
        shares[c.key] = Share(c.fixed_threads, every, c.busy, fixed=True)
    reserved = min(sum(c.fixed_threads for c in fixed if c.busy), len(every) - 1)
    pool = every[: len(every) - reserved]
    busy_gpu = [c for c in gpu if c.busy]
    own = min(len(busy_gpu), len(pool) - 1)
    for i, c in enumerate(busy_gpu):
        core = pool[len(pool) - 1 - min(i, max(own - 1, 0))] if own else pool[-1]
        shares[c.key] = Share(OFFLOADED_THREADS, (core,), True, gpu=True)
    for c in gpu:
        if not c.busy:
            shares[c.key] = Share(OFFLOADED_THREADS, pool, gpu=True)
    pool = pool[: len(pool) - own]
    busy = [c for c in planned if c.busy]
    if len(busy) > len(pool):
        for c in busy:
            shares[c.key] = Share(1, pool, True)
    elif busy:
        start = 0
        for c, n in zip(busy, divide(len(pool), [c.weight for c in busy]), strict=True):
            shares[c.key] = Share(n, pool[start : start + n], True)
            start += n
    for c in planned:
        if not c.busy:
            shares[c.key] = Share(1, pool) if busy else Share(len(pool), pool)
    return shares


def split_threads(total: int, n: int) -> list[int]:
    """A backend's `total` threads among its `n` busy workers (one each at least: with
    fewer threads than workers, the workers share the cores in time)."""
    if n <= 0:
        return []
    base, extra = divmod(max(total, n), n)
    return [base + (1 if i < extra else 0) for i in range(n)]
