"""Lemonade's per-model options API: `GET/POST/DELETE /api/v1/models/{id}/options`.

lemonade.md: "Read a model's recipe options, separated by layer, without loading it."
The layers, for Juggler:
- `saved`: the model's own entry, what `POST` (or `/load` with `save_options`) stored
  in `pins.json` ("only what was explicitly saved, or `{}` when nothing is");
- `defaults`: "What `effective` becomes if `saved` is erased": the server's settings
  (CLI > env > config file > built-in);
- `effective`: "the exact request body a `POST /v1/load` for this model uses right now",
  `model_name` included, so that it replays as a `/load` body;
- `resolved_ctx_size`: the context size a load now would use.

`POST` "merges into the model's saved entry, so keys you don't mention are left alone.
`null` removes an option" (an empty `llamacpp_args` too); "`dry_run: true` validates and
resolves the request identically but persists nothing"; "A `400` reports an unrecognized
option name, ... a value of the wrong type, or an invalid `ctx_size`, and nothing from
that request is saved"; "Saving never loads or reloads the model". Issue 52: the
saved options pass the checks a load runs (`Manager.check_options`), so a value no load
could take (threads beyond the cores, workers x parallel that cannot fit) is a 400
naming it, and nothing is saved. `pinned` "is not
settable here and is omitted from `effective` and `defaults`". `DELETE` erases the entry.

`ctx_size: -1` is Lemonade's automatic size: `resolved_ctx_size` says what it comes to
for this model now (`manager.auto_ctx`: the trained context, capped by what fits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, StrictBool, StrictStr, ValidationError, create_model

from juggler.errors import BadRequest
from juggler.options import LoadOverrides, ModelOptions, bad_request_from
from juggler.router.core.bodies import read_json
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.openapi import body_of

router = APIRouter()

#: The POST body, for the API document: the options, a mirrored `model_name`, `dry_run`.
OptionsRequest: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "OptionsRequest",
    __base__=LoadOverrides,
    model_name=(StrictStr | None, None),
    dry_run=(StrictBool, False),
)

#: Body keys that are not options: the model (the URL names it) and the preview switch.
_CONTROL = ("model_name", "dry_run")


def checked_changes(body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """A POST body's option changes (None: remove the option) and its `dry_run`; a 400
    names the first bad key. Types are strict, as Lemonade's are: `"8192"` is no size."""
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadRequest("dry_run must be a boolean", param="dry_run")
    changes = {k: v for k, v in body.items() if k not in _CONTROL}
    if "pinned" in changes:
        raise BadRequest(
            "pinned is not a saved option: use /api/v1/load or /internal/pin", param="pinned"
        )
    given = {k: v for k, v in changes.items() if v is not None}
    try:
        LoadOverrides.model_validate(given, strict=True)
    except ValidationError as exc:
        raise bad_request_from(exc) from None
    return changes, dry_run


def merged(saved: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`saved` with `changes` applied: None (or an empty `llamacpp_args`) removes a key."""
    out = dict(saved)
    for key, value in changes.items():
        if value is None or (key == "llamacpp_args" and value == ""):
            out.pop(key, None)
        else:
            out[key] = value
    return out


async def view(
    state: RouterState,
    model_id: str,
    recipe: str,
    saved: Mapping[str, Any],
    shown: Mapping[str, Any],
) -> dict[str, Any]:
    """The three layers as Lemonade answers them. `saved` is what is stored, `shown` what
    `effective` resolves (the same, except for a dry run). `resolved_ctx_size` is the
    size a load now would use (an automatic `-1` sized from the model's header)."""
    s = state.settings
    options = s.model_options(None, saved=dict(shown))
    effective = _load_body(model_id, options)
    return {
        "model_name": model_id,
        "recipe": recipe,
        "saved": dict(saved),
        "effective": effective,
        "defaults": _load_body(model_id, s.model_options(None)),
        "resolved_ctx_size": await state.manager.resolved_ctx_size(model_id, options),
    }


def _load_body(model_id: str, options: ModelOptions) -> dict[str, Any]:
    return dict(sorted({**options.model_dump(), "model_name": model_id}.items()))


def _model(state: RouterState, model_id: str) -> tuple[str, str]:
    """(the name options are saved under, the recipe); 404 for an unknown model."""
    info = state.registry.get(model_id)
    return info.name, info.recipe


@router.get("/models/{model_id:path}/options")
async def get_options(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    name, recipe = _model(state, model_id)
    saved = state.pins.saved_options(name)
    return await view(state, model_id, recipe, saved, saved)


@router.post("/models/{model_id:path}/options", openapi_extra=body_of(OptionsRequest))
async def set_options(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    name, recipe = _model(state, model_id)
    changes, dry_run = checked_changes(await read_json(request))
    saved = state.pins.saved_options(name)
    after = merged(saved, changes)
    answer = await view(state, model_id, recipe, saved, after)  # 400 before any save
    # Issue 52: what is saved is what every later load takes, so it passes a load's
    # checks first (threads beyond the cores, a load that cannot fit: 400 naming it).
    options = state.settings.model_options(None, saved=after)
    await state.manager.check_options(name, options)
    if dry_run:
        return answer
    state.pins.save_options(name, after)
    return {**answer, "saved": state.pins.saved_options(name)}


@router.delete("/models/{model_id:path}/options")
async def reset_options(model_id: str, request: Request) -> dict[str, Any]:
    state = state_of(request)
    name, recipe = _model(state, model_id)
    state.pins.save_options(name, {})
    return await view(state, model_id, recipe, {}, {})
