"""The compiled draw where the chain changes some logits before its top_k (issue 47).

A logit bias and the repetition, frequency and presence penalties change the logits of
known tokens only: the biased ones and those accepted in the penalties' window. The
compiled draw (top_k.c's `juggler_draw`) adds those to the k + m best of the row and
applies the same chain to them; llama.cpp's `llama_sampler_sample` runs that chain over
the whole vocabulary (hundreds of microseconds a row on a 49k vocabulary). The two must
draw the same tokens, seed for seed, as the penalties remember more and more of what was
drawn; and greedy decoding with banned tokens (`ignore_eos`) is a draw of the one best.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from juggler.engine.llama import best_k
from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.llama.top_k_native import library_path, sparse_draws
from tests.engine.draws import draw_alike

BIASED = ((13, 4.0), (198, 3.0), (429, -2.0), (30, 6.0), (2, float("-inf")))
#: More biased tokens than a draw takes (k + m > top_k.c's MAX_CANDIDATES).
MANY_BIASED = tuple((t, 0.5) for t in range(300, 600))

CASES = {
    "repeat penalty": SamplingParams(temperature=0.8, repeat_penalty=1.3, seed=3),
    "short window": SamplingParams(temperature=0.8, repeat_penalty=1.8, penalty_last_n=3, seed=9),
    "frequency and presence": SamplingParams(
        temperature=0.9, top_k=20, frequency_penalty=0.7, presence_penalty=0.6, seed=4
    ),
    "logit bias": SamplingParams(temperature=0.7, logit_bias=BIASED, seed=7),
    "everything": SamplingParams(
        temperature=1.2,
        top_k=64,
        top_p=0.9,
        min_p=0.0,
        repeat_penalty=1.2,
        presence_penalty=-0.5,
        logit_bias=BIASED,
        seed=8,
    ),
    "greedy, ignore_eos": SamplingParams(temperature=0.0),
    "greedy, penalties": SamplingParams(temperature=0.0, repeat_penalty=1.5, presence_penalty=1.0),
    "too many biased": SamplingParams(temperature=0.8, top_k=40, logit_bias=MANY_BIASED, seed=1),
}


@pytest.fixture(scope="module")
def model(smol_path: Path) -> Model:
    return Model(str(smol_path))


@pytest.fixture
def ctx(model: Model) -> Iterator[Any]:
    c = model.new_context(
        ContextParams(n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=16, n_threads=1)
    )
    yield c
    c.close()


def draw_both(model: Model, ctx: Any, params: SamplingParams, steps: int = 6) -> int:
    """Draw `steps` tokens for 16 prompts with the compiled draw and with the chain over
    the vocabulary (one sampler each, as a generation has), asserting they agree; how
    many of the draws the compiled one made itself."""
    if not sparse_draws():
        pytest.skip(f"{library_path()} is not built (no C compiler)")
    fast = model.new_sampler(ctx, params, banned=model.eog_tokens())
    whole = model.new_sampler(ctx, params, banned=model.eog_tokens())
    assert fast._best is not None and fast._best.sparse == bool(
        params.logit_bias or params.repeat_penalty != 1.0 or params.presence_penalty
    )
    whole._best = None  # llama_sampler_sample over the whole vocabulary
    made = 0
    draw = fast._best.drawer
    assert draw is not None

    def counted(spec: Any, row: int) -> int:
        nonlocal made
        token: int = draw(spec, row)
        made += token >= 0
        return token

    fast._best.drawer = counted
    try:
        assert draw_alike(model, ctx, fast, whole, steps) == 16 * steps
    finally:
        fast.close()
        whole.close()
    return made


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_draw_with_changed_logits_is_the_chains_draw(model: Model, ctx: Any, case: str) -> None:
    made = draw_both(model, ctx, CASES[case])
    if case == "too many biased":
        assert made == 0  # every row went to the whole chain
    else:
        assert made == 96


@pytest.mark.slow
def test_a_window_longer_than_the_ring_goes_to_the_whole_chain_once_past_it(
    model: Model, ctx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Penalties that remember more tokens than the draw's ring holds: the first draws
    are the compiled draw's, then every row is the whole chain's, and both still agree
    (the tokens the whole chain accepts are noted too)."""
    monkeypatch.setattr(best_k, "RING_CAP", 20)
    made = draw_both(model, ctx, SamplingParams(temperature=0.8, repeat_penalty=1.4, seed=5))
    assert made == 21  # the ring holds the 20 tokens accepted before the 21st draw


def test_greedy_with_banned_tokens_draws_the_one_best(model: Model, ctx: Any) -> None:
    """`ignore_eos` at temperature 0 bans the end-of-generation tokens: a draw of the
    one best allowed token (it went through the whole vocabulary: ~110 µs a row)."""
    sampler = model.new_sampler(ctx, SamplingParams(temperature=0.0), banned=model.eog_tokens())
    try:
        assert not sampler.argmax and sampler.top_k == 1 and sampler._best is not None
        assert not sampler._best.sparse
    finally:
        sampler.close()
