"""GET /metrics: render what the router holds (router/gateway/metrics.py), never a fan-out: the
backends' figures come from the `FiguresPoller` (router/core/figures.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from juggler.manager.vram import shown_bytes
from juggler.router.core.deps import state_of
from juggler.router.gateway.adapter_routes import max_active_adapters
from juggler.router.gateway.lemonade_metrics import LemonadeView
from juggler.router.gateway.metrics import CONTENT_TYPE, MetricsView, exposition

router = APIRouter()


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition 0.0.4",
            "content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}},
        }
    },
)
async def metrics(request: Request) -> Response:
    state = state_of(request)
    figures = await state.figures.figures()
    poller = state.figures
    lemonade = LemonadeView(
        backends=tuple(figures),
        seen={**poller.seen, **{f.model: f for f in figures}},
        retired_by_model=dict(poller.retired_by_model),
        totals=poller.totals(figures),
        max_models=state.manager.max_models(),
    )
    per_pid = await state.manager.vram.per_pid()
    vram = {
        s.model_name: (shown_bytes(s.gpu, s.pid, per_pid)[0], s.gpu.offloaded_layers)
        for s in state.manager.snapshot()
    }
    view = MetricsView(
        backends=tuple(figures),
        router_waiting=state.proxy.num_waiting,
        counters=state.manager.stats(),
        retired=state.figures.retired,
        lora_changed_at=state.figures.lora_changed_at,
        default_max_lora=max_active_adapters(state.settings.llamacpp_args),
        lemonade=lemonade,
        vram=vram,
    )
    return Response(exposition(view), media_type=CONTENT_TYPE)


@router.head("/metrics", include_in_schema=False)
async def metrics_head() -> Response:
    """Lemonade: "`HEAD /metrics` is also supported and returns `200 OK` with an empty
    body"."""
    return Response(b"", media_type=CONTENT_TYPE)
