"""Sampling over the k best tokens (issue 47): `top_k.top_candidates` (numpy) and the
compiled kernel (`top_k.c`, built by `make install`) find exactly the k best, best
first, equal logits by lower id, and the sampler chain run over them draws what
llama.cpp's chain draws over the whole vocabulary, seed for seed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from juggler.engine.llama.best_k import TOKEN_DATA, BestK
from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.llama.top_k import GUESS, STRIDE, WIDER, top_candidates
from juggler.engine.llama.top_k_native import library_path, native_draw, native_top_k
from tests.engine.draws import draw_alike


def best_by_sorting(row: np.ndarray, k: int, banned: np.ndarray | None = None) -> list[int]:
    ids = [i for i in np.argsort(-row, kind="stable") if banned is None or not banned[i]]
    return [int(i) for i in ids[:k] if np.isfinite(row[i])]


def kernel_best(row: np.ndarray, k: int, banned: np.ndarray | None = None) -> list[int]:
    fn = native_top_k()
    if fn is None:
        pytest.skip(f"{library_path()} is not built (no C compiler)")
    out = np.zeros(k, dtype=TOKEN_DATA)
    row = np.ascontiguousarray(row, dtype=np.float32)
    guess = GUESS if k * 2 <= GUESS * STRIDE else WIDER
    mask = None if banned is None else np.ascontiguousarray(banned, dtype=bool)
    addr = None if mask is None else mask.ctypes.data
    found = fn(row.ctypes.data, row.shape[0], k, addr, STRIDE, guess, out.ctypes.data)
    assert np.array_equal(out["logit"][:found], row[out["id"][:found]])
    return [int(i) for i in out["id"][:found]]


def test_make_install_built_the_kernel() -> None:
    """Where the machine has a C compiler, `make install` compiled top_k.c into the
    environment and the engine loads it (else it would quietly run numpy's)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc): the engine uses numpy's top-k")
    assert library_path().is_relative_to(sys.prefix)
    assert native_top_k() is not None, f"{library_path()} missing: run make install"
    assert native_draw() is not None, f"{library_path()} predates juggler_draw: make install"


@pytest.mark.parametrize("k", [1, 5, 40, 100, 128])
def test_the_kernel_finds_the_k_best_best_first(k: int) -> None:
    rng = np.random.default_rng(k)
    for trial in range(40):
        n = 49152 + 37 * (trial % 4 == 3)  # a tail shorter than the kernel's block
        row = (rng.standard_normal(n) * [0.05, 1.0, 8.0][trial % 3]).astype(np.float32)
        if trial % 4 == 3:
            row = np.round(row * 2) / 2  # many ties, some at the k-th best
        banned = None
        if trial % 2:
            banned = np.zeros(n, dtype=bool)
            banned[np.argsort(-row)[: trial % 7]] = True  # some of the best are banned
        if trial % 5 == 0:
            row[rng.integers(0, n, 20000)] = -np.inf
        expected = best_by_sorting(row, k, banned)
        assert kernel_best(row, k, banned) == expected
        assert top_candidates(row, k, banned)[0].tolist() == expected


def test_the_kernel_orders_equal_logits_by_id_and_skips_what_is_not_allowed() -> None:
    """numpy's version (no C compiler) returns the same tokens in the same order."""
    row = np.zeros(1000, dtype=np.float32)  # every logit equal: the first k ids
    assert kernel_best(row, 40) == list(range(40))
    assert top_candidates(row, 40)[0].tolist() == list(range(40))
    row[[900, 7, 500]] = 2.0
    row[[3, 600]] = np.nan
    row[[1, 2]] = np.inf
    assert kernel_best(row, 5) == [7, 500, 900, 0, 4]
    assert top_candidates(row, 5)[0].tolist() == [7, 500, 900, 0, 4]
    assert kernel_best(np.full(100, -np.inf, dtype=np.float32), 40) == []
    banned = np.ones(100, dtype=bool)
    assert kernel_best(np.ones(100, dtype=np.float32), 40, banned) == []
    short = np.arange(10, dtype=np.float32)  # fewer tokens than k, fewer than STRIDE
    assert kernel_best(short, 40) == list(range(9, -1, -1))


def test_the_kernel_finds_best_tokens_hidden_between_the_sampled_ones() -> None:
    row = np.zeros(49152, dtype=np.float32)
    hidden = [i * STRIDE + 5 for i in range(100)]
    row[hidden] = np.arange(100, dtype=np.float32) + 1
    assert kernel_best(row, 40) == hidden[::-1][:40]


@pytest.mark.parametrize("scale", [0.05, 1.0, 8.0])
def test_the_k_best_are_found_best_first(scale: float) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        row = (rng.standard_normal(49152) * scale).astype(np.float32)
        ids, logits = top_candidates(row, 40)
        assert ids.tolist() == best_by_sorting(row, 40)
        assert np.array_equal(logits, row[ids])


def test_best_tokens_hidden_between_the_sampled_ones_are_still_found() -> None:
    """The threshold is guessed from every STRIDE-th logit; when the best tokens all lie
    between those, the guess holds too few and the whole row is looked at."""
    row = np.zeros(49152, dtype=np.float32)
    hidden = [i * STRIDE + 5 for i in range(100)]
    row[hidden] = np.arange(100, dtype=np.float32) + 1
    ids, _ = top_candidates(row, 40)
    assert ids.tolist() == best_by_sorting(row, 40) == hidden[::-1][:40]


def test_banned_and_infinite_logits_are_never_candidates() -> None:
    rng = np.random.default_rng(3)
    row = rng.standard_normal(5000).astype(np.float32)
    banned = np.zeros(5000, dtype=bool)
    banned[np.argsort(-row)[:10]] = True  # the ten best are banned (ignore_eos's EOG)
    row[100:4995] = -np.inf
    ids, _ = top_candidates(row, 40, banned)
    assert ids.tolist() == best_by_sorting(row, 40, banned)
    assert not banned[ids].any() and np.isfinite(row[ids]).all()


@pytest.mark.slow
@pytest.mark.parametrize("way", ["draw", "kernel", "numpy"])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, seed=11),  # llama.cpp's defaults: top_k 40 ...
        SamplingParams(temperature=1.5, top_k=100, top_p=0.9, min_p=0.0, seed=5),
        SamplingParams(temperature=0.3, top_k=5, top_p=1.0, min_p=0.2, seed=2),
    ],
)
def test_the_draw_over_the_k_best_is_the_chains_draw_over_the_vocabulary(
    smol_path: Path, params: SamplingParams, way: str
) -> None:
    """`way`: the compiled draw (top_k.c's `juggler_draw`: one call), the compiled top-k
    with the chain applied from Python (four calls), or numpy's top-k."""
    model = Model(str(smol_path))
    ctx = model.new_context(
        ContextParams(n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=16, n_threads=1)
    )
    fast = model.new_sampler(ctx, params, banned=model.eog_tokens())
    whole = model.new_sampler(ctx, params, banned=model.eog_tokens())
    assert fast.top_k == params.top_k and fast._best is not None
    if way != "numpy" and fast._best.kernel is None:
        pytest.skip(f"{library_path()} is not built (no C compiler)")
    assert (fast._best.drawer is not None) == (fast._best.kernel is not None)
    if way == "kernel":
        fast._best.drawer = None
    if way == "numpy":
        fast._best = BestK(ctx, fast.n_vocab, fast.top_k, fast.banned, native=False)
    whole._best = None  # llama_sampler_sample over the whole vocabulary
    try:
        assert draw_alike(model, ctx, fast, whole) == 96
    finally:
        fast.close()
        whole.close()
        ctx.close()
