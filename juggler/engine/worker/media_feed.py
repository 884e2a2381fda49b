"""A worker's images: the image runs at the front of a sequence's pending input are
encoded by the projector and decoded into the sequence, by the worker that owns it
(issue 51; `llama.media` for how an image is a run of placeholder tokens).

Encoding (the projector's own graph, no KV) runs beside the worker while other streams
have work (`--image-encode background`): the worker goes on decoding them, and the
sequence waits for its embeddings; with nothing else to do the worker encodes it
itself. llama.cpp decodes an image's embeddings in a batch of their own (a batch holds
token ids or embeddings, not both), so a tick that has an encoded image runs one more
decode before the planned one: that decode (its tokens' worth of prefill) is what the
other streams wait for. A repeat of a cached image skips the encoding, and an image
whose KV is cached (a repeated prompt) skips both. `bench/bench_vision.py` measures
it. The planned batch takes a sequence's text only up to its next image.

Runs on the worker thread (the encoding thread only runs `Projector.encode`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

from juggler.engine.llama.media import Projector, is_media
from juggler.engine.schedule.batch import SeqWork
from juggler.engine.worker.config import WorkerConfig
from juggler.engine.worker.context_slot import ContextSlot
from juggler.engine.worker.generation import Generations
from juggler.engine.worker.kv import KvBook
from juggler.engine.worker.session import Session
from juggler.errors import ContextOverflow, EngineError

log = logging.getLogger(__name__)


def text_run(pending: list[int]) -> int:
    """How many pending tokens come before the first image (all when none)."""
    for i, t in enumerate(pending):
        if is_media(t):
            return i
    return len(pending)


def trailing(tokens: list[int], key: int) -> int:
    """How many of `tokens`' last tokens are `key`."""
    n = 0
    for t in reversed(tokens):
        if t != key:
            break
        n += 1
    return n


class MediaFeed:
    def __init__(
        self,
        projector: Projector,
        ctx: ContextSlot,
        kv: KvBook,
        gens: Generations,
        n_batch: int,
        worker_id: int = 0,
        *,
        background: bool = True,
    ) -> None:
        self.projector = projector
        self.ctx = ctx
        self.kv = kv
        self.gens = gens
        self.n_batch = n_batch
        self.worker_id = worker_id
        #: Images decoded into sequences, and the seconds spent encoding and decoding.
        self.num_images = 0
        self.media_s = 0.0
        #: Encodings running beside the worker, by image (`background`).
        self.background = background
        self._encoding: dict[int, concurrent.futures.Future[Any]] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: Whether other sequences have work this tick (set by the decoder).
        self.others_busy = False
        #: Decodes the worker ran while an encoding was running beside it.
        self.decodes_beside = 0

    @property
    def encoding(self) -> bool:
        """Whether an encoding runs beside the worker now."""
        return any(not f.done() for f in self._encoding.values())

    def work(self, s: Session) -> SeqWork:
        """`s`'s work for the plan: its text up to the next image (`schedule.batch`
        takes all but the last of a sequence's tokens that chooses nothing, so one more
        is counted), or all of it."""
        n = text_run(s.pending)
        if n < len(s.pending):
            return SeqWork(s.seq_id, n + 1, False)
        return SeqWork(s.seq_id, len(s.pending), s.needs_logits, s.num_draft)

    def feed(self, s: Session) -> bool:
        """Decode the images at the front of `s`'s pending input; False when `s` must
        wait (no room) or its generation was ended (an error)."""
        while s.pending and is_media(s.pending[0]):
            key = s.pending[0]
            item = self.projector.store.get(key)
            if item is None:
                return self._fail(s, EngineError("an image of this request is no longer cached"))
            n = item.n_tokens
            part = trailing(s.tokens, key) % n
            if part:  # a cached prefix ended inside this image: decode all of it again
                keep = len(s.tokens) - part
                back = s.tokens[keep:]
                before = len(s.pending)
                self.kv.rollback(s, keep)
                moved = len(s.pending) - before
                s.pending[moved:moved] = back
                continue
            if len(s.pending) < n or s.pending[n - 1] != key:
                return self._fail(s, EngineError("an image's positions were cut apart"))
            if not self._encoded(item):
                return False
            if self.kv.make_room(n) < n:
                return False
            if not self._decode(s, item):
                return False
        return True

    def _encoded(self, item: Any) -> bool:
        """Whether `item`'s embeddings are ready; if not, and other streams have work,
        its encoding runs beside the worker (started now if it is not yet)."""
        if item.embd is not None or not self.background:
            return True
        future = self._encoding.get(item.key)
        if future is None:
            if not self.others_busy:
                return True  # nothing else to do: the worker encodes it itself
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix=f"encode-{self.worker_id}"
                )
            self._encoding[item.key] = self._pool.submit(self.projector.encode, item)
            return False
        if not future.done() and self.others_busy:
            return False
        del self._encoding[item.key]
        future.result()  # waits when nothing else has work; raises its error
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _decode(self, s: Session, item: Any) -> bool:
        t0 = time.perf_counter()
        ctx = self.ctx.ensure()
        try:
            embd = self.projector.encode(item)
        except EngineError as exc:
            return self._fail(s, exc)
        rc = self.projector.decode(
            getattr(ctx, "ptr", None), item, embd, s.n_past, s.seq_id, self.n_batch
        )
        self.media_s += time.perf_counter() - t0
        if rc != 0:
            self.kv.rollback(s, s.n_past)
            return self._fail(
                s, ContextOverflow(f"llama.cpp could not decode an image ({rc}): no room")
            )
        n = item.n_tokens
        s.tokens.extend(s.pending[:n])
        del s.pending[:n]
        if s.generation is None or s.generation.num_generated == 0:
            s.num_prefilled += n
        self.num_images += 1
        return True

    def _fail(self, s: Session, error: Exception) -> bool:
        log.warning("worker %d: %s", self.worker_id, error)
        s.pending.clear()
        s.num_draft = 0
        if s.generation is not None:
            self.gens.finish(s, "error", error=error)  # type: ignore[arg-type]
        return False


def media_feed_for(
    model: Any, ctx: ContextSlot, kv: KvBook, gens: Generations, cfg: WorkerConfig, wid: int
) -> MediaFeed | None:
    """A worker's `MediaFeed` when the model has a projector (`model.projector`)."""
    projector = getattr(model, "projector", None)
    if projector is None:
        return None
    background = cfg.image_encode == "background"
    return MediaFeed(projector, ctx, kv, gens, cfg.n_batch, wid, background=background)
