"""Seed 002's test hook over HTTP, in Lemonade's shape.

`POST /internal/simulate-vram-pressure {"pct": x}`: one run of the eviction engine as if
global memory use were `x` (a fraction, e.g. 0.95). A `pct` at or above
`auto_evict_threshold_pct` runs one pressure step, `-1` runs the idle timeouts now, any
other value does nothing. Answers once downsizes are done and evictions have started.
Like every /internal/* route it needs the admin key when one is set (else a loopback
client; see `core/middleware.py`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from juggler.router.core.bodies import parse
from juggler.router.core.deps import state_of
from juggler.router.core.openapi import body_of

internal = APIRouter()


class SimulatePressure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pct: float = Field(0.0, ge=-1, le=100, allow_inf_nan=False)


@internal.post("/internal/simulate-vram-pressure", openapi_extra=body_of(SimulatePressure))
async def simulate_pressure(request: Request) -> dict[str, Any]:
    body, _ = await parse(request, SimulatePressure)
    done = await state_of(request).manager.simulate_pressure(body.pct)
    return {"status": "ok", "actions": [{"model_name": n, "action": a} for n, a in done]}
