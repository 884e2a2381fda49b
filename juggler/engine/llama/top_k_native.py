"""The compiled top-k kernel (`top_k.c`, issue 47), when `make install` built it.

Finding the k best tokens of a row took 55 microseconds a token in numpy (`top_k.py`:
eight calls, two passes over the row) inside a backend where the whole host time
between two decodes of a lone stream is about 120; the C kernel does one pass and
writes llama.cpp's candidate array directly. `make install` compiles it with the
machine's C compiler into the virtual environment (`library_path`); where there is no
compiler the engine uses `top_k.top_candidates`, which returns the same tokens in the
same order (tests/engine/test_top_k.py runs both on the same rows).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LIB_NAME = "libjuggler_top_k.so"


def library_path() -> Path:
    """Where `make install` puts the kernel: the environment's lib/juggler folder."""
    return Path(sys.prefix) / "lib" / "juggler" / LIB_NAME


@functools.cache
def _library() -> ctypes.CDLL | None:
    path = library_path()
    if not path.is_file():
        log.info("%s not built (make install compiles it): top-k in numpy", path)
        return None
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        log.warning("%s does not load (%s): top-k in numpy", path, exc)
        return None


def _function(name: str, argtypes: list[Any], restype: Any) -> Any | None:
    """The library's function `name` with its signature, or None where the library was
    not built or predates it."""
    lib = _library()
    fn = getattr(lib, name, None) if lib is not None else None
    if fn is None:
        if lib is not None:
            log.info("%s has no %s (make install rebuilds it)", library_path(), name)
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


@functools.cache
def native_top_k() -> Any | None:
    """`juggler_top_k(row, n, k, banned, stride, guess, out) -> found` (see top_k.c),
    or None when the library was not built (then numpy finds the candidates)."""
    p, i = ctypes.c_void_p, ctypes.c_int
    return _function("juggler_top_k", [p, i, i, p, i, i, p], i)


class DrawSpec(ctypes.Structure):
    """top_k.c's `draw_spec`: what `juggler_draw` needs of one sampler, set once."""

    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("logits_at", ctypes.c_void_p),
        ("chain", ctypes.c_void_p),
        ("apply", ctypes.c_void_p),
        ("accept", ctypes.c_void_p),
        ("arr", ctypes.c_void_p),
        ("banned", ctypes.c_void_p),
        ("n_vocab", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("stride", ctypes.c_int32),
        ("guess", ctypes.c_int32),
        ("fixed", ctypes.c_void_p),
        ("n_fixed", ctypes.c_int32),
        ("ring", ctypes.c_void_p),
        ("ring_cap", ctypes.c_int32),
        ("window", ctypes.c_int32),
        ("accepted", ctypes.c_int64),
        ("changed", ctypes.c_void_p),
        ("marks", ctypes.c_void_p),
    ]


@functools.cache
def native_draw() -> Any | None:
    """`juggler_draw(spec, row) -> token` (see top_k.c: the k best of a row, the chain
    applied, its choice accepted, in one call), or None where the library was not built
    or predates it (then `best_k.BestK.draw` makes the four calls itself)."""
    return _function("juggler_draw", [ctypes.c_void_p, ctypes.c_int32], ctypes.c_int32)


@functools.cache
def native_note() -> Any | None:
    """`juggler_note(spec, token)`: a token the chain accepted outside `juggler_draw`,
    for the draw's memory of what the penalties remember (see top_k.c)."""
    return _function("juggler_note", [ctypes.c_void_p, ctypes.c_int32], None)


@functools.cache
def native_draw_changed() -> Any | None:
    """`juggler_draw_changed(spec, row) -> token`: `juggler_draw` where the chain changes
    the logits of some tokens before its top_k (see top_k.c); None where the library
    predates it."""
    return _function("juggler_draw_changed", [ctypes.c_void_p, ctypes.c_int32], ctypes.c_int32)


def sparse_draws() -> bool:
    """Whether the compiled draw handles chains that change some logits (a logit bias,
    penalties) before their top_k: a library built before it could not."""
    return native_draw_changed() is not None and native_note() is not None
