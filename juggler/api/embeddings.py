"""OpenAI's embeddings and rerank request bodies, and the bounds on the tokens they
embed (issue 52: such a request is bounded by its tokens, as a chat is by its context):
the four forms of embeddings input, token id checks, and the lower bound on a text's
tokens that the router and the engine both count with. Pure data, validated identically
by the router and the engine (re-exported by `juggler.api.openai`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from juggler.api.limits import MAX_INPUTS, capped, limit_value
from juggler.api.structured import Strict

#: Most token ids in one embeddings input: far over any embedding model's context (the
#: backend refuses an input its context cannot hold), a bound before any work.
MAX_TOKEN_IDS = 65536
#: Most tokens of one embeddings or rerank request, summed over its inputs (OpenAI's
#: per-request limit). Issue 52: such a request is bounded by its tokens, as a chat is
#: by its context, not only by its count of inputs. Token ids count exactly when the
#: body is read; texts count at least one token an input and one per
#: `MAX_CHARS_PER_TOKEN` characters there, exactly once the backend tokenized them.
MAX_EMBEDDING_TOKENS = 300_000
#: Characters per token no tokenizer Juggler serves averages above (BPE tokens are a few
#: characters): what a lower bound on a text's tokens divides by.
MAX_CHARS_PER_TOKEN = 32


def too_many_tokens(num_tokens: int, *, exact: bool) -> str | None:
    """Why a request of `num_tokens` (or at least that many) cannot be embedded, or None."""
    if num_tokens <= MAX_EMBEDDING_TOKENS:
        return None
    least = "" if exact else "at least "
    return (
        f"the inputs hold {least}{num_tokens} tokens; one request embeds at most "
        f"{MAX_EMBEDDING_TOKENS} (split it)"
    )


def min_text_tokens(text: str) -> int:
    """A lower bound on the tokens of an embedded text (its special tokens aside)."""
    return 1 + len(text) // MAX_CHARS_PER_TOKEN


def _token_ids(value: list[Any], where: str) -> list[int]:
    """A non-empty list of token ids (ints >= 0; their upper bound is the model's
    vocabulary, checked by the backend that has it)."""
    if not value:
        raise ValueError(f"{where} is an empty list of token ids")
    if len(value) > MAX_TOKEN_IDS:
        raise ValueError(f"{where} has {len(value)} token ids; at most {MAX_TOKEN_IDS}")
    for token in value:
        if isinstance(token, bool) or not isinstance(token, int):
            raise ValueError(f"{where} mixes token ids with {type(token).__name__} values")
        if token < 0:
            raise ValueError(f"{where} holds the negative token id {token}")
    return value


def embedding_input(value: Any) -> Any:
    """OpenAI's four forms of embeddings input: a string, a list of strings, a list of
    token ids, or a list of lists of token ids; anything else (an empty list, forms
    mixed in one list, a negative id) is refused naming `input`."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError(
            "expected a string, a list of strings, a list of token ids or a list of lists "
            "of token ids"
        )
    if not value:
        raise ValueError("the list is empty")
    if all(isinstance(v, str | list) for v in value):
        most = limit_value(MAX_INPUTS)
        if len(value) > most:
            raise ValueError(f"at most {most} inputs in one request (got {len(value)})")
        if all(isinstance(v, str) for v in value):
            _bounded(sum(min_text_tokens(v) for v in value), exact=False)
            return value
        if all(isinstance(v, list) for v in value):
            for i, ids in enumerate(value):
                _token_ids(ids, f"input {i}")
            _bounded(sum(len(ids) for ids in value), exact=True)
            return value
    if any(isinstance(v, str | list) for v in value):
        raise ValueError("give one form: strings, token ids or lists of token ids, not a mix")
    return _token_ids(value, "the input")


def _bounded(num_tokens: int, *, exact: bool) -> None:
    why = too_many_tokens(num_tokens, exact=exact)
    if why is not None:
        raise ValueError(why)


#: What an embeddings request embeds: texts, or token id sequences of the model's own
#: vocabulary (embedded as given, never detokenized).
EmbeddingInput = str | list[int]


class EmbeddingRequest(Strict):
    input: Annotated[
        str | list[str] | list[StrictInt] | list[list[StrictInt]],
        BeforeValidator(embedding_input),
    ]
    model: StrictStr | None = None
    #: "base64": little-endian float32 vectors, base64-encoded (the router encodes them).
    encoding_format: Literal["float", "base64"] | None = None

    def inputs(self) -> list[EmbeddingInput]:
        """One entry per vector: a text, or a sequence of token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):  # validated: one form, never empty
            return [value]
        return list(value)


class RerankRequest(Strict):
    query: StrictStr
    documents: Annotated[list[str], capped(MAX_INPUTS, "documents")] = Field(min_length=1)
    model: StrictStr | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: StrictBool = True

    @field_validator("documents")
    @classmethod
    def _bounded_tokens(cls, documents: list[str], info: ValidationInfo) -> list[str]:
        """Issue 52: every document is ranked with the query: at most
        `MAX_EMBEDDING_TOKENS` of both together, summed over the documents."""
        query = info.data.get("query")
        extra = min_text_tokens(query) if isinstance(query, str) else 0
        _bounded(sum(min_text_tokens(d) + extra for d in documents), exact=False)
        return documents
