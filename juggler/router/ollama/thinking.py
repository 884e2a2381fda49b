"""Ollama's `think` as the OpenAI body's thinking fields (ollama/ollama docs/api.md,
"thinking"): `true` / `false` turn a reasoning model's thinking on or off (the template's
`enable_thinking`), "low" / "medium" / "high" set its effort (gpt-oss's levels); unset,
the model thinks as its template does by default. The backend answers a model that
cannot think with Ollama's 400 `"<model>" does not support thinking`. Pure."""

from __future__ import annotations

from typing import Any

from juggler.errors import BadRequest

LEVELS = ("low", "medium", "high")


def think_fields(think: bool | str | None, *, raw: bool = False) -> dict[str, Any]:
    """The OpenAI body fields of `think`."""
    if think is None:
        return {}
    if raw:
        raise BadRequest("think: a raw prompt skips the chat template that thinks", param="think")
    if isinstance(think, bool):
        return {"chat_template_kwargs": {"enable_thinking": think}}
    if think not in LEVELS:
        raise BadRequest(
            f"think: expected true, false or one of {', '.join(LEVELS)}, not {think[:40]!r}",
            param="think",
        )
    return {"reasoning_effort": think}
