"""Lemonade's `/internal/aliases` (admin key, as every `/internal` route): list, bind and
remove model aliases (juggler/registry/aliases.py has the rules).

lemonade.md: `GET` "Retrieves a list of all active model alias mappings" as `{"aliases":
[{"alias", "target", "downloaded", "recipe"}]}`; `POST {alias, target}` ("also accepted
as `model`") "Binds a model alias to a target model name" and answers `{"status": "ok",
"alias", "target"}`, "HTTP `400 Bad Request` if required fields are missing or invalid";
`DELETE /internal/aliases/{alias}` answers `{"status": "deleted", "alias"}`, "HTTP `404
Not Found` if the alias does not exist".
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, StrictStr

from juggler.errors import BadRequest
from juggler.registry.checkpoint import is_available
from juggler.router.core.bodies import read_json
from juggler.router.core.deps import state_of
from juggler.router.core.openapi import body_of

internal = APIRouter()


class AliasRequest(BaseModel):
    """For the API document: the alias and its target (`model` is accepted for it)."""

    model_config = ConfigDict(extra="forbid")

    alias: StrictStr
    target: StrictStr | None = None
    model: StrictStr | None = None


@internal.get("/internal/aliases")
async def list_aliases(request: Request) -> dict[str, Any]:
    registry = state_of(request).registry
    out = []
    for alias, target in sorted(registry.aliases.read().items()):
        info = registry.find(alias)
        out.append(
            {
                "alias": alias,
                "target": target,
                "downloaded": is_available(info) if info is not None else False,
                "recipe": info.recipe if info is not None else None,
            }
        )
    return {"aliases": out}


@internal.post("/internal/aliases", openapi_extra=body_of(AliasRequest))
async def bind_alias(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    alias = body.get("alias")
    target = body.get("target", body.get("model"))
    if not isinstance(alias, str) or not alias:
        raise BadRequest("alias is required (a string)", param="alias")
    if not isinstance(target, str) or not target:
        raise BadRequest("target (or model) is required (a string)", param="target")
    extra = sorted(set(body) - {"alias", "target", "model"})
    if extra:
        raise BadRequest(f"{extra[0]}: unknown parameter", param=extra[0])
    state_of(request).registry.aliases.bind(alias, target)
    return {"status": "ok", "alias": alias, "target": target}


@internal.delete("/internal/aliases/{alias:path}")
async def remove_alias(alias: str, request: Request) -> dict[str, Any]:
    state_of(request).registry.aliases.remove(alias)
    return {"status": "deleted", "alias": alias}
