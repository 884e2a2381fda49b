"""Ollama's embedding rules as pure functions: `truncate`, `dimensions`, the context an
input must fit. The I/O around them (tokenizing on the model's backend, embedding) is
`juggler.router.ollama.embed`.

Ollama's definition (docs/api.md, `POST /api/embed`): `truncate` "truncates the end of
each input to fit within context length. Returns error if `false` and context length is
exceeded. Defaults to `true`"; `dimensions` is the number of dimensions of the returned
embeddings: Ollama keeps the first `dimensions` values and normalizes them again (for
Matryoshka-trained models). The context an input must fit is the loaded context
(`num_ctx`), at most the context the model was trained for.
"""

from __future__ import annotations

import math

from juggler.errors import BadRequest, ContextOverflow

#: The message Ollama answers when an input does not fit (with `truncate: false`).
TOO_LONG = "the input length exceeds the context length"


def context_limit(ctx_size: int | None, trained: int | None) -> int | None:
    """The most tokens one input may have: the loaded context, at most the trained one
    (the embedding backend's context is the smaller); None when neither is known."""
    known = [n for n in (ctx_size, trained) if n is not None and n > 0]
    return min(known) if known else None


def kept_tokens(n_with_specials: int, n_content: int, limit: int) -> int:
    """How many content tokens of an input survive truncation to `limit`: the special
    tokens the model adds ([CLS], [SEP], BOS, EOS) always stay. Raises ContextOverflow
    when not even one content token fits."""
    n_special = max(0, n_with_specials - n_content)
    keep = min(n_content, limit - n_special)
    if keep <= 0:
        raise ContextOverflow(
            f"input after truncation exceeds the context length ({limit} tokens, "
            f"{n_special} of them the model's special tokens)",
            param="input",
        )
    return keep


def check_dimensions(dimensions: int | None, size: int) -> None:
    """400 naming `dimensions` when the model's vectors are shorter than asked."""
    if dimensions is not None and dimensions > size:
        raise BadRequest(
            f"dimensions: this model's embeddings have {size} dimensions; ask for at most {size}",
            param="dimensions",
        )


def shorten(vector: list[float], dimensions: int | None) -> list[float]:
    """Ollama's `dimensions`: the first `dimensions` values, normalized to length 1
    again; the vector unchanged when `dimensions` is None or its full size."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm > 0 else head
