"""GET /api/v1/logs: the router's and each backend's recent log lines (the LogBook).

Backend output may hold other users' prompts, so the route is guarded like /internal/*
(AuthMiddleware, `core/security.admin_refusal`): the admin key when one is set, else
loopback clients only (with the API key, as every route). Poll with `since` set to the
`next` of the last answer to get only the lines that came after it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from juggler.router.core.deps import state_of

router = APIRouter()

Level = Literal["debug", "info", "warning", "error", "critical"]


@router.get("/logs")
async def logs(
    request: Request,
    source: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[int, Query(ge=0, le=2**62)] = 0,
    contains: Annotated[str, Query(max_length=200)] = "",
    level: Level | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    """Lines after `since` (oldest first, at most the newest `limit`), from one `source`
    (`router` or a model name) or all, containing `contains` (any case), at `level` or
    above; `next` is the `since` of the next poll; `sources` lists what there is."""
    book = state_of(request).logs
    lines, last = book.query(
        source=source or None, since=since, contains=contains, level=level, limit=limit
    )
    return {
        "lines": [line.to_json() for line in lines],
        "next": last,
        "sources": book.sources(),
    }
