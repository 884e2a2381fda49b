"""Lemonade's llama.cpp compatibility routes (llamacpp.md): `GET /slots`,
`POST /slots/{id}?action=erase|save|restore` and `POST /tokenize`, forwarded to the
model's backend, which answers as llama.cpp's server does (engine/http/slots.py).

llama.cpp's server has one model; Lemonade forwards to "the currently loaded model"
("This endpoint is only available when a llama.cpp model is loaded"). With several
loaded, Juggler takes the one named by `model` (the body's, or `?model=` on /slots),
else the most recently loaded one; with none loaded and none named: 400, as Lemonade
answers "No model loaded and no model specified in request".
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, StrictStr

from juggler.api.openai import TokenizeRequest
from juggler.errors import BadRequest
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.openapi import body_of

router = APIRouter()


class SlotBody(BaseModel):
    """save/restore's body: llama.cpp's `filename`."""

    model_config = ConfigDict(extra="forbid")

    filename: StrictStr | None = None


def target_model(state: RouterState, named: str | None) -> str:
    """The model a llama.cpp-style request goes to."""
    if named:
        return named
    recent = state.manager.most_recent()
    if recent is None:
        raise BadRequest("No model loaded and no model specified in request", param="model")
    return recent.model_name


@router.get("/slots")
async def slots(request: Request, model: str | None = None) -> Response:
    state = state_of(request)
    return await state.proxy.forward(target_model(state, model), "/slots", None, method="GET")


@router.post("/slots/{slot_id}", openapi_extra=body_of(SlotBody, required=False))
async def slot_action(
    slot_id: str, request: Request, action: str = "", model: str | None = None
) -> Response:
    state = state_of(request)
    raw = await request.body()
    body: Any = (await parse(request, SlotBody))[1] if raw.strip() else None
    path = f"/slots/{quote(slot_id, safe='')}?action={quote(action, safe='')}"
    return await state.proxy.forward(target_model(state, model), path, body)


@router.post("/tokenize", openapi_extra=body_of(TokenizeRequest))
async def tokenize(request: Request) -> Response:
    """llama.cpp's tokenize: {content, add_special?, parse_special?, with_pieces?} ->
    {tokens} (ids, or {id, piece} objects with `with_pieces`)."""
    state = state_of(request)
    body, raw = await parse(request, TokenizeRequest)
    return await state.proxy.forward(target_model(state, body.model), "/tokenize", raw)
