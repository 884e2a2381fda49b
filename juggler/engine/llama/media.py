"""The boundary with llama.cpp's multimodal library (`libmtmd`): a vision projector
loaded beside the model, the tokenizing of text mixed with images, and the evaluation
of an image's chunk into a worker's context (issue 51).

An image in a prompt is a run of placeholder tokens, one per position the projector
gives it, all the same negative id derived from a hash of the image's pixels
(`placeholder`). Everything that compares token lists (the prefix cache, parking,
sessions) then treats the same image as the same tokens and another image as different
ones, with no change; only the worker, which must not put a placeholder in a batch,
knows better (`worker.media_feed`). `MediaStore` maps each placeholder to the image's
chunk (and, once encoded, its embeddings), least recently used ones forgotten.

Thread rules: tokenizing (`Projector.tokenize`) runs on any thread; encoding and
decoding an image run on the worker thread that owns the sequence, encoding under one
lock (the projector's compute graph is one for the process).
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import llama_cpp.llama_cpp as C
from llama_cpp import mtmd_cpp as M

from juggler.errors import BadRequest, CheckpointMissing, EngineError, LoadFailed

log = logging.getLogger(__name__)

#: Images whose chunks (and placeholders) a backend remembers; one in use by a request
#: that still waits is never the least recently used for long.
STORE_ITEMS = 256
#: Images whose encoded embeddings are kept, so a repeat skips the projector.
EMBD_ITEMS = 16


def placeholder(digest: bytes) -> int:
    """The token id of every position of the image whose hash is `digest`: negative
    (no vocabulary has one), inside int32, never -0."""
    return -(1 + (int.from_bytes(digest[:4], "little") & 0x3FFFFFFF))


def is_media(token: int) -> bool:
    return token < 0


@dataclass(frozen=True)
class Picture:
    """A decoded image: RGB bytes, row by row, and its size."""

    rgb: bytes
    width: int
    height: int

    @property
    def digest(self) -> bytes:
        return hashlib.sha256(
            self.width.to_bytes(4, "little") + self.height.to_bytes(4, "little") + self.rgb
        ).digest()


@dataclass(eq=False)
class MediaItem:
    """One image's chunk: `n_tokens` positions, its embeddings once encoded."""

    key: int
    n_tokens: int
    chunk: Any
    embd: Any = None
    #: How often the projector encoded it (1 at most while it stays cached).
    num_encodes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class MediaStore:
    """Placeholder id -> `MediaItem`, least recently used forgotten past `STORE_ITEMS`."""

    def __init__(self, max_items: int = STORE_ITEMS, max_embd: int = EMBD_ITEMS) -> None:
        self._items: collections.OrderedDict[int, MediaItem] = collections.OrderedDict()
        self._embd: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.max_items = max_items
        self.max_embd = max_embd
        self._lock = threading.Lock()

    def get(self, key: int) -> MediaItem | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, item: MediaItem) -> MediaItem:
        """Keep `item` (or the one already kept for its key, which is returned)."""
        with self._lock:
            old = self._items.get(item.key)
            if old is not None:
                self._items.move_to_end(item.key)
                M.mtmd_input_chunk_free(item.chunk)
                return old
            self._items[item.key] = item
            while len(self._items) > self.max_items:
                _, gone = self._items.popitem(last=False)
                self._embd.pop(gone.key, None)
                M.mtmd_input_chunk_free(gone.chunk)
            return item

    def embedded(self, item: MediaItem) -> None:
        """`item` was encoded: keep its embeddings among the `max_embd` newest."""
        with self._lock:
            self._embd[item.key] = None
            self._embd.move_to_end(item.key)
            while len(self._embd) > self.max_embd:
                key, _ = self._embd.popitem(last=False)
                dropped = self._items.get(key)
                if dropped is not None:
                    dropped.embd = None

    def __len__(self) -> int:
        return len(self._items)


class Projector:
    """A projector (mmproj GGUF) loaded for `model_ptr`'s model."""

    def __init__(
        self, path: str, model_ptr: Any, *, n_embd: int, n_threads: int, use_gpu: bool
    ) -> None:
        if not os.path.isfile(path):
            raise CheckpointMissing(f"projector file not found: {path}")
        params = M.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = max(1, n_threads)
        params.print_timings = False
        # A marker of our own: text a client writes can never pass for an image.
        self.marker = f"<__juggler_media_{secrets.token_hex(8)}__>"
        self._marker_bytes = self.marker.encode()
        params.media_marker = self._marker_bytes
        ctx = M.mtmd_init_from_file(path.encode(), model_ptr, params)
        if not ctx:
            raise LoadFailed(f"llama.cpp could not load the projector {path} for this model")
        self.ptr: Any = ctx
        self.path = path
        self.vision = bool(M.mtmd_support_vision(ctx))
        self.audio = bool(M.mtmd_support_audio(ctx))
        if bool(M.mtmd_decode_use_mrope(ctx)):
            M.mtmd_free(ctx)
            raise LoadFailed(
                f"the projector {path} places images with M-RoPE (Qwen2-VL style), which "
                "Juggler's engine does not support yet"
            )
        self.bytes = os.path.getsize(path)
        #: The width of an image token's embedding (the text model's, mtmd checks).
        self.n_embd = n_embd
        self.store = MediaStore()
        self._encode_lock = threading.Lock()
        self.num_encodes = 0
        self.encode_s = 0.0

    # -- any thread --------------------------------------------------------------------
    def tokenize(self, text: str, pictures: list[Picture], *, add_special: bool) -> list[int]:
        """`text` (one `marker` per picture, in order) as tokens, each picture a run of
        its placeholder; raises BadRequest when they do not match or the prompt ends on
        an image (its last position would have to choose the first token)."""
        if text.count(self.marker) != len(pictures):
            raise BadRequest(
                f"the prompt has {text.count(self.marker)} image places for {len(pictures)} images"
            )
        bitmaps = []
        chunks = M.mtmd_input_chunks_init()
        try:
            for pic in pictures:
                buf = (ctypes.c_ubyte * len(pic.rgb)).from_buffer_copy(pic.rgb)
                bm = M.mtmd_bitmap_init(pic.width, pic.height, buf)
                if not bm:
                    raise BadRequest("an image could not be read by the projector")
                M.mtmd_bitmap_set_id(bm, pic.digest.hex().encode())
                bitmaps.append(bm)
            raw = text.encode()
            inp = M.mtmd_input_text()
            inp.text = raw
            inp.text_len = len(raw)
            inp.add_special = add_special
            inp.parse_special = True
            arr = (M.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            rc = M.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), arr, len(bitmaps))
            if rc != 0:
                raise BadRequest(f"the projector could not take these images (mtmd_tokenize {rc})")
            return self._tokens_of(chunks, pictures)
        finally:
            M.mtmd_input_chunks_free(chunks)
            for bm in bitmaps:
                M.mtmd_bitmap_free(bm)

    def _tokens_of(self, chunks: Any, pictures: list[Picture]) -> list[int]:
        out: list[int] = []
        n = int(M.mtmd_input_chunks_size(chunks))
        last_is_media = False
        for i in range(n):
            chunk = M.mtmd_input_chunks_get(chunks, i)
            kind = int(M.mtmd_input_chunk_get_type(chunk))
            if kind == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t(0)
                toks = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                out.extend(int(toks[j]) for j in range(count.value))
                last_is_media = last_is_media and count.value == 0
                continue
            if kind != M.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                raise BadRequest("audio input is not supported")
            n_tokens = int(M.mtmd_input_chunk_get_n_tokens(chunk))
            n_pos = int(M.mtmd_input_chunk_get_n_pos(chunk))
            if n_pos != n_tokens:
                raise BadRequest("this projector's images take positions Juggler cannot place")
            raw_id = M.mtmd_input_chunk_get_id(chunk) or b""
            key = placeholder(bytes.fromhex(raw_id.decode()) + n_tokens.to_bytes(4, "little"))
            if self.store.get(key) is None:
                copy = M.mtmd_input_chunk_copy(chunk)
                if not copy:
                    raise EngineError("mtmd_input_chunk_copy failed")
                self.store.put(MediaItem(key, n_tokens, copy))
            out.extend([key] * n_tokens)
            last_is_media = True
        if last_is_media:
            raise BadRequest("a prompt cannot end with an image; add text after it")
        return out

    def tokens_per_image(self, width: int, height: int) -> int:
        """The positions one image of this size takes (tokenizes a lone marker)."""
        pic = Picture(bytes(width * height * 3), width, height)
        chunks = M.mtmd_input_chunks_init()
        buf = (ctypes.c_ubyte * len(pic.rgb)).from_buffer_copy(pic.rgb)
        bm = M.mtmd_bitmap_init(width, height, buf)
        try:
            inp = M.mtmd_input_text()
            inp.text = self._marker_bytes
            inp.text_len = len(self._marker_bytes)
            inp.add_special = False
            inp.parse_special = True
            arr = (M.mtmd_bitmap_p_ctypes * 1)(bm)
            if M.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), arr, 1) != 0:
                return 0
            return int(M.mtmd_helper_get_n_tokens(chunks))
        finally:
            M.mtmd_input_chunks_free(chunks)
            M.mtmd_bitmap_free(bm)

    # -- the worker thread --------------------------------------------------------------
    def encode(self, item: MediaItem) -> Any:
        """The image's embeddings (`n_tokens` rows), encoded once while they stay cached."""
        with item.lock:
            if item.embd is not None:
                return item.embd
            t0 = time.perf_counter()
            with self._encode_lock:
                rc = int(M.mtmd_encode_chunk(self.ptr, item.chunk))
                if rc != 0:
                    raise EngineError(f"the projector failed to encode an image ({rc})")
                out = M.mtmd_get_output_embd(self.ptr)
                n = item.n_tokens * self.n_embd
                embd = (ctypes.c_float * n)()
                ctypes.memmove(embd, out, n * ctypes.sizeof(ctypes.c_float))
            self.encode_s += time.perf_counter() - t0
            self.num_encodes += 1
            item.num_encodes += 1
            item.embd = embd
            self.store.embedded(item)
            return embd

    def decode(
        self, ctx_ptr: Any, item: MediaItem, embd: Any, n_past: int, seq_id: int, n_batch: int
    ) -> int:
        """Decode the image's embeddings into sequence `seq_id` from position `n_past`;
        returns llama.cpp's code (0: done)."""
        new_n_past = C.llama_pos(0)
        return int(
            M.mtmd_helper_decode_image_chunk(
                self.ptr,
                ctx_ptr,
                item.chunk,
                ctypes.cast(embd, ctypes.POINTER(ctypes.c_float)),
                n_past,
                seq_id,
                n_batch,
                ctypes.byref(new_n_past),
                M.mtmd_helper_post_decode_callback(),
                None,
            )
        )

    def close(self) -> None:
        if self.ptr:
            M.mtmd_free(self.ptr)
            self.ptr = None
