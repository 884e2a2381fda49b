"""Ollama's embeddings on a backend: `/api/embed` and `/api/embeddings` send their
inputs to the model's `/v1/embeddings`, as Ollama does, truncating what is too long.

Truncation (Ollama's `truncate`, on by default) happens only when the backend refuses an
input for its length (`context_length_exceeded`), as Ollama's `embedWithRetry` does: each
input longer than the context (`embed_rules.context_limit`: the loaded `ctx_size`, at
most the GGUF's trained context) is tokenized on the backend, its content tokens are cut
so the input with the model's own special tokens fits, the kept tokens are turned back
into text (`/detokenize`), and that text is embedded. The cut text is tokenized once more
to check it fits (a piece may not come back as the same tokens); a few such rounds at
most. With `truncate: false` the backend's refusal is the answer (400).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import Request, Response

from juggler.errors import ContextOverflow, JugglerError
from juggler.router.core.catalog_view import file_facts
from juggler.router.core.deps import RouterState
from juggler.router.ollama import embed_rules as oe
from juggler.router.ollama.answer import backend_error
from juggler.router.ollama.residency import current_options

#: Rounds of cut-and-check before an input that will not fit is refused.
_FIT_ROUNDS = 4


async def embed_texts(
    state: RouterState,
    model: str,
    texts: list[str],
    *,
    truncate: bool,
    client: Request | None = None,
) -> tuple[list[list[float]], int]:
    """(one vector per text, prompt tokens) from `model`'s backend. Raises the backend's
    error (ContextOverflow with `truncate` off for an input that does not fit). If
    `client` leaves, the backend request is closed, which stops its work (issue 52)."""
    response = await _embeddings(state, model, texts, client)
    if _too_long(response):
        if not truncate:  # Ollama's words first, then which input and by how much
            error = backend_error(response)
            raise ContextOverflow(f"{oe.TOO_LONG} ({error.message})", param="input")
        texts = await _fitted(state, model, texts)
        response = await _embeddings(state, model, texts, client)
    if response.status_code >= 400:
        raise backend_error(response)
    data = json.loads(bytes(response.body))
    rows = sorted(data.get("data", []), key=lambda d: d.get("index", 0))
    return [r["embedding"] for r in rows], int(data.get("usage", {}).get("prompt_tokens", 0))


async def _embeddings(
    state: RouterState, model: str, texts: list[str], client: Request | None
) -> Response:
    body = {"model": model, "input": texts}
    return await state.proxy.forward(model, "/v1/embeddings", body, client_request=client)


def _too_long(response: Response) -> bool:
    if response.status_code != 400:
        return False
    try:
        err = json.loads(bytes(response.body)).get("error", {})
    except (ValueError, AttributeError):
        return False
    return isinstance(err, dict) and err.get("code") == ContextOverflow.code


async def vector_size(state: RouterState, model: str) -> int | None:
    """The length of `model`'s embeddings, from its GGUF header (None: not known before
    it is loaded), so that `dimensions` is checked before anything is computed."""
    facts = await asyncio.to_thread(file_facts, state.registry.get(model))
    if facts.gguf is None:
        return None
    size = facts.gguf.metadata.get(f"{facts.gguf.architecture}.embedding_length")
    return size if isinstance(size, int) and size > 0 else None


async def _limit(state: RouterState, model: str) -> int:
    ctx = int(current_options(state, model).get("ctx_size") or state.settings.ctx_size)
    facts = await asyncio.to_thread(file_facts, state.registry.get(model))
    trained = facts.gguf.context_length if facts.gguf is not None else None
    limit = oe.context_limit(ctx, trained)
    return limit if limit is not None else ctx


async def _fitted(state: RouterState, model: str, texts: list[str]) -> list[str]:
    limit = await _limit(state, model)
    return [await _fit(state, model, text, limit) for text in texts]


async def _fit(state: RouterState, model: str, text: str, limit: int) -> str:
    """`text`, or its beginning that fits `limit` tokens with the special tokens."""
    n_full = len(await _tokens(state, model, text, special=True))
    if n_full <= limit:
        return text
    content = await _tokens(state, model, text, special=False)
    keep = oe.kept_tokens(n_full, len(content), limit)
    for _ in range(_FIT_ROUNDS):
        cut = await _detokenize(state, model, content[:keep])
        n_cut = len(await _tokens(state, model, cut, special=True))
        if n_cut <= limit:
            return cut
        keep -= n_cut - limit
        if keep <= 0:
            break
    raise ContextOverflow(f"{oe.TOO_LONG}: the input could not be cut to {limit} tokens")


async def _tokens(state: RouterState, model: str, text: str, *, special: bool) -> list[int]:
    body = {"model": model, "content": text, "add_special": special}
    tokens: list[int] = (await _call(state, model, "/tokenize", body))["tokens"]
    return tokens


async def _detokenize(state: RouterState, model: str, tokens: list[int]) -> str:
    body = {"model": model, "tokens": tokens}
    return str((await _call(state, model, "/detokenize", body))["content"])


async def _call(state: RouterState, model: str, path: str, body: dict[str, Any]) -> Any:
    response = await state.proxy.forward(model, path, body)
    if response.status_code >= 400:
        raise backend_error(response)
    try:
        return json.loads(bytes(response.body))
    except ValueError as exc:
        raise JugglerError(f"the backend's {path} answer is not JSON") from exc
