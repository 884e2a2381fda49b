"""llama.cpp server's `GET /slots` and `POST /slots/{id}?action=...`, and its `/tokenize`
with `with_pieces`, for a Juggler backend (the router forwards Lemonade's routes here).

llamacpp.md: `GET /slots` "Returns the current state of all processing slots"; slot `id`
is global: worker `w`'s sequence `s` is slot `w * parallel + s`. `action=erase` "removes
all cached context from the slot" and answers `{"id_slot"}` (with llama.cpp's
`n_erased`). `save` and `restore` need "the `--slot-save-path` argument": Juggler has no
such path, so they are refused (501 `not_supported_error`, as llama.cpp refuses them
without it). `/tokenize`: `add_special` (default false), `parse_special` (default true),
`with_pieces` ("return token pieces along with IDs": a piece is a string, or its bytes
when they are not valid UTF-8, as llama.cpp answers).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, StrictStr
from starlette.concurrency import run_in_threadpool

from juggler.api.openai import TokenizeRequest
from juggler.engine.schedule.messages import EraseSlot
from juggler.errors import BadRequest, JugglerError

if TYPE_CHECKING:
    from juggler.engine.runtime import Engine


class SlotsUnsupported(JugglerError):
    status = 501
    code = "not_supported"
    type = "not_supported_error"


class SlotAction(BaseModel):
    """The body of save/restore: llama.cpp's `filename`."""

    model_config = ConfigDict(extra="forbid")

    filename: StrictStr | None = None


def slots_body(engine: Engine) -> list[dict[str, Any]]:
    parallel = engine.config.flags.parallel
    n_ctx = engine.config.flags.ctx_size
    return [
        slot.as_json(w * parallel + i, n_ctx)
        for w, snap in enumerate(engine.worker_snapshots())
        for i, slot in enumerate(snap.slots)
    ]


async def slot_action(engine: Engine, slot_id: int, action: str) -> dict[str, Any]:
    engine.require_llm()
    parallel = engine.config.flags.parallel
    if not 0 <= slot_id < parallel * len(engine.workers):
        raise BadRequest(f"Invalid slot ID: {slot_id}", param="id_slot")
    if action in ("save", "restore"):
        raise SlotsUnsupported(
            f"slot {action} needs llama.cpp's --slot-save-path, which Juggler does not "
            "have: slot save and restore are not supported"
        )
    if action != "erase":
        raise BadRequest(f"Invalid action: {action!r} (erase, save or restore)", param="action")
    assert engine.master is not None and engine.loop is not None
    reply: asyncio.Future[dict[str, Any]] = engine.loop.create_future()
    engine.master.submit(EraseSlot(slot_id // parallel, slot_id % parallel, reply))
    answer = await reply
    return {"id_slot": slot_id, **answer}


def _piece(engine: Engine, token: int) -> str | list[int]:
    raw = engine.model.piece(token) or engine.model.special_text(token).encode()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def tokenize(engine: Engine, body: TokenizeRequest) -> dict[str, Any]:
    tokens = engine.model.tokenize(
        body.content, add_special=body.add_special, parse_special=body.parse_special
    )
    if not body.with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": _piece(engine, t)} for t in tokens]}


def add_routes(app: FastAPI, engine: Engine) -> None:
    @app.get("/slots")
    async def slots() -> list[dict[str, Any]]:
        engine.require_llm()
        return slots_body(engine)

    @app.post("/slots/{slot_id}")
    async def act(slot_id: int, action: str = "", body: SlotAction | None = None) -> Any:
        return await slot_action(engine, slot_id, action)

    @app.post("/tokenize")
    async def tokenize_route(body: TokenizeRequest) -> dict[str, Any]:
        return await run_in_threadpool(tokenize, engine, body)
