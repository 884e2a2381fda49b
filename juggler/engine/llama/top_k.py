"""The `k` most likely tokens of a logits row, found without sorting the vocabulary
(issue 47). Pure numpy.

llama.cpp's sampler chain starts by copying the whole vocabulary into a candidate array
(49,152 entries for SmolLM2: 590 kB written a token) and partially sorting it for top_k:
about 60 microseconds a row, a fifth of a token's host time where the device is fast.
With top_k set, every later step of the chain (top_p, min_p, temperature, the seeded
draw) sees only those k tokens, sorted by logit, so the chain run over exactly them
draws what it draws over the whole vocabulary.

They are found with one pass over the row: a threshold is guessed from every
`STRIDE`-th logit (the `GUESS`-th best of those: about `GUESS * STRIDE` tokens of the row
lie above it), the tokens at or above it are taken, and when at least k are there the k
best are among them; only those few are ordered. A guess that holds fewer than k (the
best tokens happen to lie between the sampled ones) is lowered, then given up for the
whole row: the answer is always exact, only its cost varies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Every STRIDE-th logit is looked at for the threshold.
STRIDE = 64
#: The threshold is the GUESS-th best of those, then the WIDER-th if that held too few.
GUESS = 4
WIDER = 16


def top_candidates(row: Any, k: int, banned: Any | None = None) -> tuple[Any, Any]:
    """The ids (int32) and logits of the `k` best tokens of `row` (fewer if the row has
    fewer allowed ones), best first; `banned` (a boolean mask over the vocabulary, or
    None): tokens never chosen (their logit is -inf to llama.cpp's chain)."""
    idx = None
    sample = row[::STRIDE]
    for nth in (GUESS, WIDER):
        if k * 2 > nth * STRIDE or nth >= sample.shape[0]:
            continue
        threshold = np.partition(sample, sample.shape[0] - nth)[sample.shape[0] - nth]
        if not np.isfinite(threshold):
            continue
        found = np.flatnonzero(row >= threshold)
        found = found[np.isfinite(row[found])]  # not +inf either, as the kernel
        if banned is not None:
            found = found[~banned[found]]
        if len(found) >= k:
            idx = found
            break
    if idx is None:  # every allowed token
        idx = np.flatnonzero(np.isfinite(row))
        if banned is not None:
            idx = idx[~banned[idx]]
    logits = row[idx]
    if len(idx) > k:  # those at or above the k-th best, still in id order
        keep = logits >= np.partition(logits, len(idx) - k)[len(idx) - k]
        idx, logits = idx[keep], logits[keep]
    order = np.argsort(-logits, kind="stable")[:k]  # equal logits: the lower id first
    return idx[order].astype(np.int32), logits[order]
