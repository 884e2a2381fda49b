"""Sampling over the k best tokens (issue 47): `top_k.top_candidates` finds exactly the
k best, and the sampler chain run over them draws what llama.cpp's chain draws over the
whole vocabulary, seed for seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.llama.top_k import STRIDE, top_candidates


def best_by_sorting(row: np.ndarray, k: int, banned: np.ndarray | None = None) -> list[int]:
    ids = [i for i in np.argsort(-row, kind="stable") if banned is None or not banned[i]]
    return [int(i) for i in ids[:k] if np.isfinite(row[i])]


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
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, seed=11),  # llama.cpp's defaults: top_k 40 ...
        SamplingParams(temperature=1.5, top_k=100, top_p=0.9, min_p=0.0, seed=5),
        SamplingParams(temperature=0.3, top_k=5, top_p=1.0, min_p=0.2, seed=2),
    ],
)
def test_the_draw_over_the_k_best_is_the_chains_draw_over_the_vocabulary(
    smol_path: Path, params: SamplingParams
) -> None:
    model = Model(str(smol_path))
    ctx = model.new_context(
        ContextParams(n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=16, n_threads=1)
    )
    batch = model.new_batch(512)
    fast = model.new_sampler(ctx, params, banned=model.eog_tokens())
    whole = model.new_sampler(ctx, params, banned=model.eog_tokens())
    assert fast.top_k == params.top_k
    whole.top_k = 0  # llama_sampler_sample over the whole vocabulary
    try:
        prompts = [model.tokenize(f"Story {i}: once upon a", add_special=True) for i in range(16)]
        drawn = 0
        for step in range(6):
            batch.clear()
            rows = []
            for seq, p in enumerate(prompts):
                for j, tok in enumerate(p):
                    row = batch.add(tok, j, seq, j == len(p) - 1)
                rows.append(row)
            assert ctx.decode(batch) == 0
            for seq, row in enumerate(rows):
                a, b = fast.sample(row), whole.sample(row)
                assert a == b, f"step {step}, row {seq}"
                drawn += 1
                prompts[seq] = [*prompts[seq], a]
            ctx.seq_rm(-1)
        assert drawn == 96
    finally:
        fast.close()
        whole.close()
        batch.close()
        ctx.close()
