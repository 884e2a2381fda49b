"""From the shared OpenAI request bodies (`juggler.api.openai`) to engine values.

The router and the backend validate with the same bodies; what a body means to the
engine (its `SamplingParams`, its chat messages as a template reads them) is decided
here, on the backend side only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from juggler.api.openai import AdapterSpec, ChatMessage, SamplingBody
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.schedule.messages import AdapterRef

_DEFAULTS = SamplingParams()


def sampling_params(
    body: SamplingBody, default_max: int, max_override: int | None = None
) -> SamplingParams:
    """The sampling a body asks for; unset fields take llama.cpp server's defaults and the
    token limit defaults to `default_max` (the context size)."""
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
        stop=body.stops(),
        ignore_eos=body.ignore_eos,
    )


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as a chat template reads them ({"role", "content"} with text only)."""
    return [m.as_template_input() for m in messages]


def adapter_ref(spec: AdapterSpec | None) -> AdapterRef | None:
    """The LoRA adapter the router asked this request to run with."""
    return AdapterRef(spec.id, spec.path) if spec is not None else None
