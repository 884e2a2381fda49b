"""A worker's llama.cpp context, which can be freed and made again (seed 002's downsize).

Seed 002's soft idle: "a llama.cpp backend frees its contexts (KV cache and compute
buffers) and keeps the weights mapped." `ContextSlot` is the one place that holds the
worker's live context. The worker's parts (`KvBook`, `Decoder`, `Generations`) all hold
the slot, never the context itself, so `release()` frees it for all of them and
`ensure()` makes a new one with the same parameters. Between the two nothing may touch
the KV: the worker parks every session and cached prefix first (see `Worker.downsize`);
a call that comes anyway makes the context again rather than fail.

`bytes` is what the context took when it was made, measured as the growth of the
process's resident memory (KV cells, compute buffers and llama.cpp's bookkeeping), so
that the router can say what a downsize gives back before asking for it.

Owned by the worker thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from juggler.engine.llama.ports import Adapter, LlamaContext, Logits, SeqState, TokenBatch
from juggler.engine.worker.thread_tuner import ThreadTuner

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def device_buffers(ctx: object) -> tuple[tuple[str, int], ...]:
    """A context's buffers per GPU device, from its `placement` (none for a fake)."""
    placement = getattr(ctx, "placement", None)
    return tuple(placement.by_device().items()) if placement is not None else ()


def rss_bytes() -> int:
    """This process's resident memory (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class ContextSlot:
    def __init__(
        self,
        make: Callable[[], LlamaContext],
        threads: Callable[[], int] | None = None,
        *,
        tune: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._make = make
        self._clock = clock
        #: Asked before every decode: the thread count the compute plan gives now.
        self._threads = threads
        #: With `tune`, each decode runs with the count of those that measured fastest.
        self.tuner = ThreadTuner() if tune and threads is not None else None
        self._ctx: LlamaContext | None = None
        self._removals_before = 0
        #: Resident memory the context took when it was last made.
        self.bytes = 0
        #: Bytes of its buffers on each GPU device, as llama.cpp logged them (issue 48).
        self.devices: tuple[tuple[str, int], ...] = ()
        #: How often it was freed and made again, and how long the last making took.
        self.num_releases = 0
        self.last_make_s = 0.0
        self._n_ctx: int = self.ensure().n_ctx
        #: The thread count of the last decode.
        self.last_threads = 0
        #: The last tuned decode not yet reported to the tuner: its threads, rows, start
        #: and end (`perf_counter`). Its time is the cycle up to the next decode's start.
        self._open: tuple[int, int, float, float] | None = None

    # -- the slot's own --------------------------------------------------------------
    @property
    def is_released(self) -> bool:
        return self._ctx is None

    def ensure(self) -> LlamaContext:
        """The live context, made again if it was released."""
        if self._ctx is None:
            before = rss_bytes()
            t0 = time.perf_counter()
            self._ctx = self._make()
            self.last_make_s = time.perf_counter() - t0
            self.bytes = max(0, rss_bytes() - before)
            self.devices = device_buffers(self._ctx)
        return self._ctx

    def release(self) -> None:
        """Free the context (its KV cells and compute buffers)."""
        if self._ctx is not None:
            self._removals_before += self._ctx.num_removals
            self._ctx.close()
            self._ctx = None
            self.num_releases += 1

    # -- LlamaContext ------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def num_removals(self) -> int:
        live = self._ctx.num_removals if self._ctx is not None else 0
        return self._removals_before + live

    @property
    def last_trial(self) -> bool:
        """Whether the last decode ran with a thread count the tuner was trying, not the
        one it chose (`ThreadTuner.trial`): its time is not what decodes cost."""
        return self.tuner is not None and self.tuner.trial

    def decode(self, batch: TokenBatch, *, streamed: bool = False) -> int:
        """Decode `batch`. With the tuner, at the thread count it chooses for the batch's
        rows, `streamed` or not (see `ThreadTuner`), and tell it what that cost: a
        streamed decode its own time, another the cycle from its start to the next
        decode's start (`settle` when none follows at once)."""
        ctx = self.ensure()
        if self._threads is None:  # as the context was made: `last_threads` stays 0
            return ctx.decode(batch)
        tuner = self.tuner
        if tuner is None:
            self.last_threads = self._threads()
            ctx.set_threads(self.last_threads)
            return ctx.decode(batch)
        t0 = self._clock()
        self._report_open(t0)
        rows = batch.n_tokens
        n = self.last_threads = tuner.choose(self._threads(), rows, streamed)
        ctx.set_threads(n)
        rc = ctx.decode(batch)
        if streamed:
            tuner.observe(n, rows, self._clock() - t0, streamed=True)
        else:
            self._open = (n, rows, t0, self._clock())
        return rc

    def settle(self) -> None:
        """The worker is about to wait for work: the last decode is reported with its
        own time, as no next decode follows it at once (a wait is not its cost)."""
        self._report_open(None)

    def _report_open(self, until: float | None) -> None:
        """Tell the tuner what the open decode cost: up to `until` (the next decode's
        start), or its own time (None)."""
        if self._open is None or self.tuner is None:
            return
        n, rows, start, end = self._open
        self._open = None
        self.tuner.observe(n, rows, (end if until is None else until) - start)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return self.ensure().seq_rm(seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self.ensure().seq_cp(src, dst, p0, p1)

    def seq_state(self, seq_id: int) -> SeqState | None:
        return self.ensure().seq_state(seq_id)

    def restore_seq_state(self, seq_id: int, state: SeqState) -> bool:
        return self.ensure().restore_seq_state(seq_id, state)

    def logits_row(self, row: int) -> Logits:
        return self.ensure().logits_row(row)

    def set_adapter(self, adapter: Adapter | None) -> None:
        self.ensure().set_adapter(adapter)

    def set_threads(self, n: int) -> None:
        self.ensure().set_threads(n)

    def close(self) -> None:
        self.release()
