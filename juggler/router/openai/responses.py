"""The Responses API's routes: a response lives on the backend that made it.

The backend keeps each stored response and the session that holds its conversation's
KV (engine/http/response_store.py), so the router remembers which server (one load of
one model) holds each response id, as it does for sessions (`core/tables.py`). It picks
the id itself and gives it to the backend (`RESPONSE_ID_HEADER`), so it knows the id
before the first byte comes back. Continuing (`previous_response_id`), retrieving and
deleting go to that server and never load a model; if that server is gone, so is the
response (404 `response_not_found`).
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from juggler.api.responses import RESPONSE_ID_HEADER, ResponsesRequest
from juggler.errors import BadRequest, ModelNotLoaded, ResponseNotFound
from juggler.manager.lease import Lease
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.image_fetch import inline_images
from juggler.router.core.modelfile_requests import apply_modelfile_responses
from juggler.router.core.openapi import body_of
from juggler.router.core.tables import SessionEntry

router = APIRouter()


async def _lease_for(state: RouterState, response_id: str, param: str | None = None) -> Lease:
    entry = state.responses.get(response_id, param)
    try:
        return await state.manager.lease(entry.server_id)
    except ModelNotLoaded:
        state.responses.drop(response_id)
        raise ResponseNotFound(
            f"response {response_id!r} is gone: the backend of {entry.model!r} that held it "
            "was unloaded",
            param=param,
        ) from None


@router.post("/responses", openapi_extra=body_of(ResponsesRequest))
async def create_response(request: Request) -> Response:
    state = state_of(request)
    body, raw = await parse(request, ResponsesRequest)
    if not body.model:
        raise BadRequest("model is required", param="model")
    await inline_images(raw, state.settings)  # http(s) images, where allowed (issue 51)
    apply_modelfile_responses(state, body.model, raw)  # a created model's Modelfile (Ollama's)
    target = state.adapters.route(body.model, raw)  # a LoRA adapter runs on its base
    prev = body.previous_response_id
    if prev is not None:
        entry = state.responses.get(prev, "previous_response_id")
        if entry.model != body.model:
            raise BadRequest(
                f"previous_response_id: that response was made by {entry.model!r}; "
                "continue it with the same model",
                param="previous_response_id",
            )
        lease = await _lease_for(state, prev, "previous_response_id")
    else:
        lease = await state.proxy.acquire(target.model)
    rid = f"resp_{uuid.uuid4().hex}"
    if body.store:
        live = {s.server_id for s in state.manager.snapshot()}
        state.responses.add(rid, SessionEntry(body.model, lease.server_id), live)
    end = state.adapters.hold(target)
    try:
        return await state.proxy.forward(
            target.model,
            "/v1/responses",
            raw,
            lease=lease,
            client_request=request,
            extra_headers={RESPONSE_ID_HEADER: rid},
            on_release=end,
        )
    except BaseException:
        end()
        raise


async def _on_stored(request: Request, response_id: str, method: str) -> Response:
    state = state_of(request)
    entry = state.responses.get(response_id)
    lease = await _lease_for(state, response_id)
    response = await state.proxy.forward(
        entry.model, f"/v1/responses/{response_id}", None, method=method, lease=lease
    )
    if response.status_code == 404 or (method == "DELETE" and response.status_code < 300):
        state.responses.drop(response_id)
    return response


@router.get("/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Response:
    return await _on_stored(request, response_id, "GET")


@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Response:
    return await _on_stored(request, response_id, "DELETE")
