"""GET /metrics: gather every ready backend's figures and render them (router/metrics.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import APIRouter, Request, Response

from juggler.manager.snapshot import ServerSnapshot, ServerState
from juggler.router.deps import state_of
from juggler.router.metrics import CONTENT_TYPE, BackendFigures, MetricsView, exposition

router = APIRouter()
SCRAPE_TIMEOUT_S = 2.0


async def _figures(client: httpx.AsyncClient, snap: ServerSnapshot) -> BackendFigures:
    base = BackendFigures(
        model=snap.model_name,
        model_type=snap.type.value,
        device=snap.device.label(),
        in_flight=snap.in_flight,
        pinned=snap.pinned,
    )
    if snap.recipe != "llamacpp":
        # Other servers do not speak our /stats: count what the router has in flight.
        return BackendFigures(**{**base.__dict__, "running": snap.in_flight})
    try:
        response = await client.get(snap.backend_url + "/stats", timeout=SCRAPE_TIMEOUT_S)
        data: dict[str, Any] = response.json()
    except (httpx.HTTPError, ValueError):
        return base
    return BackendFigures(
        **{
            **base.__dict__,
            "running": int(data.get("requests_running") or 0),
            "waiting": int(data.get("requests_waiting") or 0),
            "kv_used": int(data.get("kv_cells_used") or 0),
            "kv_total": int(data.get("kv_cells_total") or 0),
        }
    )


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state = state_of(request)
    ready = [s for s in state.manager.snapshot() if s.status is ServerState.READY]
    figures = await asyncio.gather(*(_figures(state.proxy.client, s) for s in ready))
    view = MetricsView(
        backends=tuple(figures),
        router_waiting=state.proxy.num_waiting,
        counters=state.manager.stats(),
    )
    return Response(exposition(view), media_type=CONTENT_TYPE)
