"""Session routes: a session lives on one backend for its whole life (seed 003).

"No session migration: a session is pinned to one worker for its lifetime." The router
remembers which server (one load of one model) holds each session and leases exactly
that server for the session's requests; it never loads a model for a session request.
If that server is gone (evicted, crashed, reloaded) or being evicted, the session is
gone too: 404 `session_not_found`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from juggler.api.openai import SessionCreate, SessionGenerate, SessionInput
from juggler.errors import BackendDead, ModelNotLoaded, SessionNotFound
from juggler.manager.lease import Lease
from juggler.router.core.bodies import parse, read_json
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.openapi import body_of
from juggler.router.core.tables import SessionEntry

router = APIRouter()


async def _lease_for(state: RouterState, session_id: str) -> tuple[SessionEntry, Lease]:
    """A lease on the server that holds the session, without loading anything."""
    entry = state.sessions.get(session_id)
    try:
        return entry, await state.manager.lease(entry.server_id)
    except ModelNotLoaded:
        state.sessions.drop(session_id)
        raise SessionNotFound(
            f"session {session_id!r} ended: the backend of {entry.model!r} that held it is gone",
            param="session_id",
        ) from None


@router.post("/sessions", openapi_extra=body_of(SessionCreate))
async def create_session(request: Request) -> Any:
    state = state_of(request)
    body, _ = await parse(request, SessionCreate)
    state.sessions.prune({s.server_id for s in state.manager.snapshot()})
    state.sessions.check_room()  # before any backend work
    backend_body: dict[str, Any] = {}
    target = state.adapters.route(body.model, backend_body)
    lease: Lease = await state.proxy.acquire(target.model)
    try:
        response = await state.proxy.client.post(
            lease.backend_url + "/v1/sessions", json=backend_body
        )
    except Exception as exc:
        await state.manager.report_backend_failure(lease)
        raise BackendDead(f"backend for {body.model!r} failed: {exc!r}") from exc
    finally:
        lease.release()
    if response.status_code != 200:
        return Response(
            response.content, status_code=response.status_code, media_type="application/json"
        )
    session_id = str(response.json()["session_id"])
    state.sessions.prune({s.server_id for s in state.manager.snapshot()})
    adapter_id = target.adapter.adapter_id if target.adapter else None
    state.sessions.add(session_id, SessionEntry(body.model, lease.server_id, adapter_id))
    return {"session_id": session_id, "model": body.model}


async def _forward(
    request: Request, session_id: str, action: str, method: str = "POST"
) -> Response:
    state = state_of(request)
    body = await read_json(request) if method == "POST" and action != "cancel" else {}
    entry = state.sessions.get(session_id)
    unregistered = entry.adapter_id and state.adapters.book.get(entry.adapter_id) is None
    if unregistered and method != "DELETE":
        raise SessionNotFound(
            f"session {session_id!r} ended: its LoRA adapter {entry.adapter_id!r} was unregistered",
            param="session_id",
        )
    entry, lease = await _lease_for(state, session_id)
    path = f"/v1/sessions/{session_id}" + (f"/{action}" if action else "")
    end = state.adapters.hold_id(entry.adapter_id)
    try:
        response = await state.proxy.forward(
            entry.model, path, body, method=method, lease=lease, on_release=end
        )
    except BaseException:
        end()
        raise
    if response.status_code == 404 or (method == "DELETE" and response.status_code < 300):
        state.sessions.drop(session_id)
    return response


@router.post("/sessions/{session_id}/input", openapi_extra=body_of(SessionInput))
async def session_input(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "input")


@router.post("/sessions/{session_id}/generate", openapi_extra=body_of(SessionGenerate))
async def session_generate(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "generate")


@router.post("/sessions/{session_id}/cancel")
async def session_cancel(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "cancel")


@router.delete("/sessions/{session_id}")
async def session_delete(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "", method="DELETE")
