"""Lemonade management bodies the router validates (the OpenAI bodies live in
`juggler.api.openai`, shared with the engine).

A bad body is a 400 naming the field (see bodies.validate), never a 422.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    create_model,
    field_validator,
)

from juggler.errors import BadRequest
from juggler.options import LoadOverrides

#: Lemonade's /load body (seed 000/002): the model, its pin, and every per-model option
#: of `juggler.options.ModelOptions` (optional; given values beat CLI/env/config), plus
#: the checkpoint/recipe Lemonade clients send to register a model on the fly.
LoadRequest: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "LoadRequest",
    __base__=LoadOverrides,
    model_name=(StrictStr, ...),
    pinned=(StrictBool | None, None),
    #: Lemonade: keep this load's options for every later load of the model.
    save_options=(StrictBool, False),
    checkpoint=(StrictStr | None, None),
    recipe=(StrictStr | None, None),
)


def load_overrides(body: BaseModel) -> dict[str, Any]:
    """The per-model options a /load body gave (None = not given)."""
    return {k: getattr(body, k) for k in LoadOverrides.model_fields}


def tombstones(body: BaseModel) -> frozenset[str]:
    """The options a /load body gave as an explicit `null` (lemonade.md: it "ignores only
    that saved key for this load and falls through to the lower default layers without
    changing `recipe_options.json`")."""
    given = body.model_fields_set
    return frozenset(
        k for k in LoadOverrides.model_fields if k in given and getattr(body, k) is None
    )


def options_to_save(
    saved: dict[str, Any], given: dict[str, Any], cleared: frozenset[str]
) -> dict[str, Any]:
    """What `save_options: true` stores. lemonade.md: "Any previously stored value for
    `model_name` is replaced", "concrete values are persisted as usual while a `null`
    tombstone preserves the existing saved value for that key". Pure."""
    out = {k: v for k, v in given.items() if v is not None}
    out.update({k: saved[k] for k in cleared if k in saved})
    return out


class UnloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr | None = None


class PinRequest(BaseModel):
    """/internal/pin, as Lemonade takes it: the model as `model_name` or `model`, and
    `pinned`, a boolean, always given."""

    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    pinned: StrictBool

    @classmethod
    def parse(cls, raw: bytes) -> PinRequest:
        """The body, or a 400 in Lemonade's words: "Invalid JSON body", "Parameter 'model'
        or 'model_name' is required", "Parameter 'pinned' is required and must be a
        boolean"."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise BadRequest(f"Invalid JSON body: {exc}") from None
        if not isinstance(data, dict):
            raise BadRequest("Invalid JSON body: expected a JSON object")
        name = data.pop("model_name", None)
        alias = data.pop("model", None)
        if name is None:
            name = alias
        elif alias is not None and alias != name:
            raise BadRequest("model and model_name name different models", param="model")
        if not isinstance(name, str) or not name:
            raise BadRequest("Parameter 'model' or 'model_name' is required", param="model_name")
        pinned = data.pop("pinned", None)
        if not isinstance(pinned, bool):
            raise BadRequest("Parameter 'pinned' is required and must be a boolean", param="pinned")
        if data:
            extra = sorted(data)[0]
            error = BadRequest(f"{extra}: unknown or unsupported parameter", param=extra)
            error.code = "unsupported_parameter"
            raise error
        return cls(model_name=name, pinned=pinned)


def projector_name(v: str | None) -> str | None:
    """A projector's file name, checked: a .gguf file, no folders (issue 51)."""
    if v is not None and (not v.endswith(".gguf") or "/" in v or "\\" in v or "\x00" in v):
        raise ValueError("mmproj names a .gguf file beside the checkpoint's (no folders)")
    return v or None


class PullRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    #: Lemonade: answer with server-sent progress events instead of one JSON object.
    stream: StrictBool = False
    checkpoint: StrictStr = ""
    #: Lemonade's CLI form: {"main": "org/repo:QUANT"} (only the main checkpoint).
    checkpoints: dict[StrictStr, StrictStr] | None = None
    recipe: StrictStr = "llamacpp"
    labels: list[StrictStr] = Field(default_factory=list)
    # Lemonade's boolean label flags.
    reasoning: StrictBool = False
    vision: StrictBool = False
    embedding: StrictBool = False
    reranking: StrictBool = False
    #: The vision projector: a file of the checkpoint's repository (downloaded with it),
    #: or for a local checkpoint a file beside it (issue 51).
    mmproj: StrictStr | None = None
    command: StrictStr | None = None
    health_path: StrictStr = "/health"
    device: StrictStr | None = None

    @field_validator("mmproj")
    @classmethod
    def _projector_file(cls, v: str | None) -> str | None:
        return projector_name(v)

    @field_validator("checkpoints")
    @classmethod
    def _main_only(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for kind in v or {}:
            if kind not in ("main", "mmproj"):
                raise ValueError(
                    f"only the main and mmproj checkpoints are supported, not {kind!r}"
                )
        return v

    def projector(self) -> str | None:
        """The projector's file name: `mmproj`, or `checkpoints.mmproj` (`org/repo:FILE`
        of the main checkpoint's repository) (issue 51)."""
        given = (self.checkpoints or {}).get("mmproj")
        if not given:
            return self.mmproj
        repo, sep, name = given.rpartition(":")
        main = self.main_checkpoint()
        if not sep or main.rpartition(":")[0] not in (repo, main) or "/" in name:
            raise BadRequest(
                "checkpoints.mmproj: org/repo:FILE.gguf of the main checkpoint's repository",
                param="checkpoints.mmproj",
            )
        if self.mmproj and self.mmproj != name:
            raise BadRequest("mmproj and checkpoints.mmproj differ", param="mmproj")
        try:
            return projector_name(name)
        except ValueError as exc:
            raise BadRequest(f"checkpoints.mmproj: {exc}", param="checkpoints.mmproj") from None

    def main_checkpoint(self) -> str:
        if self.checkpoints and self.checkpoints.get("main"):
            if self.checkpoint and self.checkpoint != self.checkpoints["main"]:
                raise BadRequest("checkpoint and checkpoints.main differ", param="checkpoint")
            return self.checkpoints["main"]
        return self.checkpoint


class RegisterRequest(BaseModel):
    """Lemonade's `POST /api/v1/models/register`: one `user.*` model definition, nothing
    downloaded. Collections (`components`) and ModelScope are not built: refused."""

    model_config = ConfigDict(extra="forbid")

    model_name: StrictStr
    recipe: StrictStr
    checkpoint: StrictStr = ""
    #: Lemonade's named checkpoints: only `main` (Juggler has no multi-file models).
    checkpoints: dict[StrictStr, StrictStr] | None = None
    source: StrictStr | None = None
    labels: list[StrictStr] = Field(default_factory=list)
    components: list[StrictStr] | None = None

    @field_validator("checkpoints")
    @classmethod
    def _main_only(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return PullRequest._main_only(v)

    @field_validator("source")
    @classmethod
    def _huggingface(cls, v: str | None) -> str | None:
        if v not in (None, "huggingface"):
            raise ValueError(f"source {v!r} is not supported: Juggler pulls from Hugging Face")
        return v

    @field_validator("components")
    @classmethod
    def _no_collections(cls, v: list[str] | None) -> list[str] | None:
        if v:
            raise ValueError("collections (components) are not supported by Juggler")
        return v

    def main_checkpoint(self) -> str:
        main = (self.checkpoints or {}).get("main", "")
        if main and self.checkpoint and main != self.checkpoint:
            raise BadRequest("checkpoint and checkpoints.main differ", param="checkpoint")
        return main or self.checkpoint


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
