"""From the shared OpenAI request bodies (`juggler.api.openai`) to engine values.

The router and the backend validate with the same bodies; what a body means to the
engine (its `SamplingParams`, its grammar, its chat messages as a template reads them)
is decided here, on the backend side only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from juggler.api.openai import AdapterSpec, ChatMessage, SamplingBody
from juggler.api.structured import ResponseFormat
from juggler.engine.adapter_paths import check_adapter_path
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import AdapterRef
from juggler.engine.structured.grammar import guard, json_object_grammar, schema_grammar
from juggler.errors import BadRequest

_DEFAULTS = SamplingParams()


def sampling_params(
    body: SamplingBody, default_max: int, max_override: int | None = None, *, n_vocab: int
) -> SamplingParams:
    """The sampling a body asks for; unset fields take llama.cpp server's defaults and the
    token limit defaults to `default_max` (the context size). The grammar is the one of
    `grammar` / `json_schema` (see `format_grammar` for response_format and tools)."""
    limit = max_override if max_override is not None else body.token_limit()
    d = _DEFAULTS
    return SamplingParams(
        max_new_tokens=default_max if limit is None else limit,
        temperature=d.temperature if body.temperature is None else body.temperature,
        top_k=d.top_k if body.top_k is None else body.top_k,
        top_p=d.top_p if body.top_p is None else body.top_p,
        min_p=d.min_p if body.min_p is None else body.min_p,
        seed=body.seed,
        repeat_penalty=d.repeat_penalty if body.repeat_penalty is None else body.repeat_penalty,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        penalty_last_n=_last_n(body.repeat_last_n, default_max),
        stop=body.stops(),
        ignore_eos=body.ignore_eos,
        grammar=extension_grammar(body),
        logit_bias=logit_bias(body.logit_bias, n_vocab),
        speculative=body.speculative,
    )


def _last_n(value: int | None, n_ctx: int) -> int:
    """llama.cpp server's repeat_last_n: -1 is the whole context."""
    if value is None:
        return _DEFAULTS.penalty_last_n
    return n_ctx if value < 0 else value


def extension_grammar(body: SamplingBody) -> str | None:
    """llama.cpp server's `grammar` (GBNF) or `json_schema`, at most one of them."""
    if body.grammar is not None and body.json_schema is not None:
        raise BadRequest("json_schema: give either grammar or json_schema", param="json_schema")
    if body.grammar is not None:
        return guard(body.grammar, param="grammar")
    if body.json_schema is not None:
        return schema_grammar(body.json_schema, param="json_schema")
    return None


def format_grammar(params: SamplingParams, fmt: ResponseFormat | None, param: str) -> str | None:
    """The grammar of `response_format` (None for text), which may not be combined with
    `grammar` / `json_schema`."""
    schema = fmt.schema_of() if fmt is not None else None
    if schema is None:
        return params.grammar
    if params.grammar is not None:
        raise BadRequest(
            f"{param}: give either {param} or the grammar / json_schema extensions", param=param
        )
    if not schema:
        return json_object_grammar()
    sub = "json_schema.schema" if fmt is not None and fmt.type == "json_schema" else "schema"
    return schema_grammar(schema, param=f"{param}.{sub}")


def logit_bias(bias: dict[str, float] | None, n_vocab: int) -> tuple[tuple[int, float], ...]:
    out = []
    for key, value in (bias or {}).items():
        token = int(key)
        if token >= n_vocab:
            raise BadRequest(
                f"logit_bias: token {token} is not in the vocabulary ({n_vocab} tokens)",
                param="logit_bias",
            )
        out.append((token, value))
    return tuple(out)


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The sampling of each of `n` choices: with a seed, choice i draws with seed + i, so
    the choices differ and the same request gives the same choices again."""
    if params.seed is None:
        return [params] * n
    return [dataclasses.replace(params, seed=params.seed + i) for i in range(n)]


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as a chat template reads them ({"role", "content"} with text only)."""
    return [m.as_template_input() for m in messages]


def adapter_ref(spec: AdapterSpec | None) -> AdapterRef | None:
    """The LoRA adapter the router asked this request to run with, once its path is
    known to be a registered adapter's (`adapter_paths`)."""
    if spec is None:
        return None
    check_adapter_path(spec.path)
    return AdapterRef(spec.id, spec.path)
