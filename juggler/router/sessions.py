"""Session routes: a session lives on one backend for its whole life (seed 003).

The router hands out its own session ids and remembers, for each, the model, the pid of
the backend process that holds its KV, and the backend's own id. If that backend is gone
(evicted, crashed, reloaded), the session is gone too: 404 `session_not_found`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from juggler.errors import BackendDead, SessionNotFound
from juggler.manager.lease import Lease
from juggler.router.bodies import parse, read_json
from juggler.router.deps import state_of
from juggler.router.schemas import SessionCreate
from juggler.router.session_table import SessionEntry

router = APIRouter()


async def _lease_for(request: Request, session_id: str) -> tuple[SessionEntry, Lease]:
    """A lease on the backend that holds the session, without loading anything new."""
    state = state_of(request)
    entry = state.sessions.get(session_id)
    alive = any(
        s.model_name == entry.model and s.pid == entry.pid for s in state.manager.snapshot()
    )
    if alive:
        lease: Lease = await state.manager.acquire(entry.model)
        if lease.pid == entry.pid:
            return entry, lease
        lease.release()
    state.sessions.drop(session_id)
    raise SessionNotFound(
        f"session {session_id!r} ended: the backend of {entry.model!r} that held it is gone",
        param="session_id",
    )


@router.post("/sessions")
async def create_session(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, SessionCreate)
    lease: Lease = await state.manager.acquire(body.model)
    try:
        response = await state.proxy.client.post(lease.backend_url + "/v1/sessions", json={})
    except Exception as exc:
        await state.manager.report_backend_failure(lease)
        raise BackendDead(f"backend for {body.model!r} failed: {exc!r}") from exc
    finally:
        lease.release()
    if response.status_code != 200:
        return Response(response.content, status_code=response.status_code)  # type: ignore[return-value]
    backend_id = str(response.json()["session_id"])
    session_id = state.sessions.add(SessionEntry(body.model, lease.pid, backend_id))
    return {"session_id": session_id, "model": body.model}


async def _forward(
    request: Request, session_id: str, action: str, method: str = "POST"
) -> Response:
    state = state_of(request)
    body = await read_json(request) if method == "POST" and action != "cancel" else {}
    entry, lease = await _lease_for(request, session_id)
    path = f"/v1/sessions/{entry.backend_id}" + (f"/{action}" if action else "")
    response = await state.proxy.forward(entry.model, path, body, method=method, lease=lease)
    if method == "DELETE" and response.status_code < 300:
        state.sessions.drop(session_id)
    return response


@router.post("/sessions/{session_id}/input")
async def session_input(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "input")


@router.post("/sessions/{session_id}/generate")
async def session_generate(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "generate")


@router.post("/sessions/{session_id}/cancel")
async def session_cancel(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "cancel")


@router.delete("/sessions/{session_id}")
async def session_delete(session_id: str, request: Request) -> Response:
    return await _forward(request, session_id, "", method="DELETE")
