"""How many of its threads a worker decodes with: the count that decodes fastest, as
measured (issue 47).

The compute plan gives a worker at most `n` threads (`engine.threads`). Using all of them
is not always faster: ggml's threads meet at a barrier after every operation, so a
decode of a few rows of a small model is done sooner by one thread than by two that wait
for each other, and on a machine that is busy with other work (a browser, another
model, the router and the client of this very request) a barrier waits for whichever
thread the kernel took away, for a whole time slice. Measured on 2 cores: one row of the
host-bound test model took 0.59 ms with one thread and 1.4-2.8 ms with two while other
processes ran.

`ThreadTuner` keeps, per decode size (rows, by powers of two) and thread count, the
times of the last `WINDOW` decodes, and decodes with the count whose median time is the
least; fewer threads win unless more are `MORE_THREADS_GAIN` faster (they would hold
cores that the event loop, the router and the clients need). A median, not an average: a
count's first decode pays for starting its threads (tens of milliseconds), and one such
outlier must not keep a faster count away for hundreds of decodes. Every
`EXPLORE_EVERY`-th decode of a size tries another count, and a try that beats the chosen
count is tried again at once until its median decides, so the choice follows the machine
as its load changes. A try that loses doubles the wait before the next one, up to
`MAX_EXPLORE_EVERY` decodes, until the choice changes: trying two threads starts
OpenMP's helper thread, which then spins for milliseconds on the core the event loop,
the router and the client need. Measured on 2 cores (the host-bound test model, one
streamed client, backend direct): with a try every 64 decodes the helper spun a third of
a core and the stream ran at 1,640-1,670 tokens a second, 1,760-1,800 with these waits.
(With one thread fixed, 1,900-2,030: when one and two threads decode a row about as
fast, noise still flips the choice for a while, and each flip listens closely again.)
What a decode costs is what the worker reports (`ContextSlot.decode`): for an
unstreamed answer, the cycle from the decode's start to the next one's, so that the
sampling and bookkeeping between decodes count, and the helper threads spinning through
them; for a streamed one, the decode's own time, kept apart (`key_of`): a streamed
token's host work (the event loop writing it, the router relaying it, the client reading
it) runs beside the next decode on the cores its threads would use, so the two kinds
choose apart. Measured on 2 cores, host-bound model, one client through the router: two
threads' cycles 320-340 us against one thread's 400-420 unstreamed; streamed, two
threads' cycles read 330 us at first and 520-550 once the router and the client fell
behind, so the worker's own clock cannot judge a streamed cycle, and its decodes took
507 us with two threads against 381 with one.
An unstreamed try's first `WARM_UP` decodes are left out: they wake its threads (a try
of two after a stretch of one took 430-560 us, then 320-340), and judged by them two
threads never won. A streamed try is judged by its first decode: between a stream's
decodes its host work takes the cores, so each of its decodes wakes the helper again,
and judged warm, two threads were chosen more often and the stream lost
(`bench/bench_host.py --levels 1 --modes sse`: 0.92x, the backend's CPU a token 647 ->
791 us).

A decode run with another count than the chosen one (the first decodes of a size, a
try, a retry) is a *trial* (`trial` says whether the last `choose` was one): its time
says nothing of what a decode of that size costs from now on, and the worker's cost
model, which sizes speculative drafts (`schedule.decode_cost`), must not learn from it.
It did: the first decodes of each new size ran with one thread, so a two-row draft of
SmolLM2 was priced at 20 ms instead of 14, never paid, and was never tried again (a
lone stream lost its drafts: 98-105 tokens a second against 117-119 without the tuner).
Pure: the worker feeds it each decode's time (`observe`); owned by the worker thread.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field

#: Decodes of one size and thread count whose median decides. The first decodes of each
#: request are slow whatever the count (a lone client on 2 cores: 600, 500, 450 us, then
#: 330-410), and with a window of 5 those three flipped the choice at every request.
WINDOW = 15
#: Decodes of one size between two tries of another thread count.
EXPLORE_EVERY = 64
#: The most decodes of one size between two tries, once tries keep losing.
MAX_EXPLORE_EVERY = 512
#: More threads are chosen only when they decode this much faster (0.1: 10%).
MORE_THREADS_GAIN = 0.1
#: Decodes a count needs before its median is trusted.
MIN_SAMPLES = 3
#: An unstreamed try's first decodes, left out: they wake its threads (module doc).
WARM_UP = 3


@functools.cache
def candidates(n_max: int) -> tuple[int, ...]:
    """The thread counts tried under a limit of `n_max`: all, half, one."""
    return tuple(sorted({max(1, n_max), max(1, n_max // 2), 1}))


def size_of(rows: int) -> int:
    """The size class of a decode of `rows` rows (1, 2-3, 4-7, ... 512 and more)."""
    return min(max(rows, 1), 512).bit_length()


def key_of(rows: int, streamed: bool) -> int:
    """What a decode's times are kept by: its size, and whether it serves a stream."""
    return 2 * size_of(rows) + streamed


@dataclass
class _Stat:
    times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    #: Decodes measured in all (the window keeps the last WINDOW).
    samples: int = 0
    #: The window's median, kept as times are added (`choose` reads it every decode).
    median_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.times.append(seconds)
        self.samples += 1
        ordered = sorted(self.times)
        mid = len(ordered) // 2
        self.median_s = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


#: What `choose` reads for a count not heard yet (never written).
_UNHEARD = _Stat()


@dataclass
class ThreadTuner:
    #: (size, threads) -> that count's recent decode times at that size.
    stats: dict[tuple[int, int], _Stat] = field(default_factory=dict)
    #: Decodes of each size so far (what exploration counts).
    decodes: dict[int, int] = field(default_factory=dict)
    #: Per size: the count chosen as best, and a count that beat it on a try and is
    #: tried again until its median decides.
    chosen: dict[int, int] = field(default_factory=dict)
    retry: dict[int, int] = field(default_factory=dict)
    #: Per size: decodes between two tries now, and the decode count of the next try.
    every: dict[int, int] = field(default_factory=dict)
    next_try: dict[int, int] = field(default_factory=dict)
    #: Whether the count the last `choose` gave is a trial, not the chosen one.
    trial: bool = False
    #: The thread count of the last decode observed.
    last_threads: int = 0
    #: Per size: the decodes of the try under way left out so far (`WARM_UP`).
    warming: dict[int, int] = field(default_factory=dict)

    def choose(self, n_max: int, rows: int, streamed: bool = False) -> int:
        """The thread count for a decode of `rows` rows with at most `n_max` threads."""
        self.trial = True
        options = candidates(n_max)
        if len(options) == 1:
            self.trial = False
            return options[0]
        size = key_of(rows, streamed)
        seen = [self.stats.get((size, n), _UNHEARD) for n in options]
        # Each count is heard first, the most threads first: where a decode is big they
        # win, and a new size's first decodes (a longer prompt's) are not run slowly.
        for n, stat in zip(reversed(options), reversed(seen), strict=True):
            if stat.samples < MIN_SAMPLES:
                return n
        best = self._best(options, seen)
        count = self.decodes.get(size, 0)
        if self.chosen.get(size, best) != best:  # the load changed: listen closely again
            self.every[size] = EXPLORE_EVERY
            self.next_try[size] = count + EXPLORE_EVERY
        self.chosen[size] = best
        again = self.retry.get(size)
        if again in options and again != best:
            return again
        if count >= self.next_try.get(size, EXPLORE_EVERY - 1):
            self.next_try[size] = count + self.every.get(size, EXPLORE_EVERY)
            others = [n for n in options if n != best]
            # The count tried least of late, so that each is heard from in turn.
            return min(others, key=lambda n: self.stats[(size, n)].samples)
        self.trial = False
        return best

    @staticmethod
    def _best(options: tuple[int, ...], seen: list[_Stat]) -> int:
        """The fewest threads whose time more threads do not beat by MORE_THREADS_GAIN."""
        best, best_s = options[0], seen[0].median_s
        for n, stat in zip(options[1:], seen[1:], strict=True):
            if stat.median_s < best_s * (1.0 - MORE_THREADS_GAIN):
                best, best_s = n, stat.median_s
        return best

    def observe(self, threads: int, rows: int, seconds: float, streamed: bool = False) -> None:
        """A decode of `rows` rows took `seconds` with `threads` threads."""
        size = key_of(rows, streamed)
        self.decodes[size] = self.decodes.get(size, 0) + 1
        switched, self.last_threads = threads != self.last_threads, threads
        best = self.chosen.get(size)
        warmed = self.warming.get(size, 0)
        warm_up = 0 if streamed else WARM_UP
        if best is not None and threads != best and (switched or warmed) and warmed < warm_up:
            self.warming[size] = warmed + 1  # the try wakes its threads: try again
            self.retry[size] = threads
            return
        if warmed:
            del self.warming[size]
        stat = self.stats.get((size, threads))
        if stat is None:
            stat = self.stats[(size, threads)] = _Stat()
        stat.add(seconds)
        if best is None or threads == best:
            return
        best_stat = self.stats.get((size, best))
        if (
            best_stat is not None
            and best_stat.times
            and seconds < best_stat.median_s * (1.0 - MORE_THREADS_GAIN if threads > best else 1.0)
        ):
            self.retry[size] = threads  # beat the chosen count: hear from it again
        else:
            self.retry.pop(size, None)
            every = self.every.get(size, EXPLORE_EVERY)
            self.every[size] = min(2 * every, MAX_EXPLORE_EVERY)
