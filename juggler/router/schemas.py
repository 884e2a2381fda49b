"""Lemonade management bodies the router validates (the OpenAI bodies live in
`juggler.api.openai`, shared with the engine).

A bad body is a 400 naming the field (see bodies.validate), never a 422.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, create_model

from juggler.options import LoadOverrides

#: Lemonade's /load body (seed 000/002): the model, its pin, and every per-model option
#: of `juggler.options.ModelOptions` (optional; given values beat CLI/env/config), plus
#: the checkpoint/recipe Lemonade clients send to register a model on the fly.
LoadRequest: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "LoadRequest",
    __base__=LoadOverrides,
    model_name=(StrictStr, ...),
    pinned=(StrictBool | None, None),
    checkpoint=(StrictStr | None, None),
    recipe=(StrictStr | None, None),
)


def load_overrides(body: BaseModel) -> dict[str, Any]:
    """The per-model options a /load body gave (None = not given)."""
    return {k: getattr(body, k) for k in LoadOverrides.model_fields}


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr | None = None


class PinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    pinned: StrictBool = True


class PullRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    checkpoint: StrictStr = ""
    recipe: StrictStr = "llamacpp"
    labels: list[StrictStr] = Field(default_factory=list)
    # Lemonade's boolean label flags.
    reasoning: StrictBool = False
    vision: StrictBool = False
    embedding: StrictBool = False
    reranking: StrictBool = False
    command: StrictStr | None = None
    health_path: StrictStr = "/health"
    device: StrictStr | None = None


class DeleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr


class SetRequest(BaseModel):
    """POST /internal/set: run-time settings (Lemonade-compatible)."""

    model_config = ConfigDict(extra="forbid")

    max_loaded_models: int | list[int] | str | None = None
    #: Seed 002, global: take effect at once and are kept in the config file.
    auto_evict: StrictBool | None = None
    auto_evict_threshold_pct: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
