"""The token lists of an embeddings or rerank request, made in a thread of the backend.

Issue 52: what one request may cost is bounded by its tokens (`MAX_EMBEDDING_TOKENS`
summed over its inputs), checked as the inputs are tokenized, so a request over the
bound is refused before the rest of it is tokenized, and a request whose caller left
(`Abandon` set) stops at the next input.
"""

from __future__ import annotations

from collections.abc import Sequence

from juggler.api.embeddings import too_many_tokens
from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import LlamaModel
from juggler.engine.schedule.messages import Abandon
from juggler.engine.worker.embed import rerank_tokens
from juggler.errors import BadRequest

Inputs = tuple[tuple[int, ...], ...]


def _check(num_tokens: int, index: int, num_inputs: int, abandon: Abandon) -> None:
    """Refuse a request whose first `index + 1` inputs already hold too many tokens."""
    why = too_many_tokens(num_tokens, exact=index + 1 == num_inputs)
    if why is not None:
        raise BadRequest(why, param="input")
    if abandon.is_set:
        raise BadRequest("the client left")


def embed_inputs(
    model: LlamaModel, items: Sequence[str | Sequence[int]], abandon: Abandon
) -> Inputs:
    """One token list per item: a text tokenized with the model's special tokens, token
    ids (of the model's vocabulary) as given."""
    n_vocab = model.n_vocab
    inputs: list[tuple[int, ...]] = []
    num_tokens = 0
    for i, item in enumerate(items):
        if isinstance(item, str):
            toks = tuple(model.tokenize(item, add_special=True, parse_special=False))
        else:
            bad = next((t for t in item if not 0 <= t < n_vocab), None)
            if bad is not None:
                raise BadRequest(
                    f"input: token {bad} (input {i}) is outside the model's vocabulary "
                    f"(0..{n_vocab - 1})",
                    param="input",
                )
            toks = tuple(item)
        inputs.append(toks)
        num_tokens += len(toks)
        _check(num_tokens, i, len(items), abandon)
    return tuple(inputs)


def rerank_inputs(model: Model, query: str, documents: Sequence[str], abandon: Abandon) -> Inputs:
    """One query-document token list per document (`rerank_tokens`)."""
    inputs: list[tuple[int, ...]] = []
    num_tokens = 0
    for i, doc in enumerate(documents):
        inputs.append(tuple(rerank_tokens(model, query, doc)))
        num_tokens += len(inputs[-1])
        _check(num_tokens, i, len(documents), abandon)
    return tuple(inputs)
