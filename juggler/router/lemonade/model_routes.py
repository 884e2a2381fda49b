"""Lemonade's model installation routes: `/api/v1/pull` (JSON, or server-sent events
with `stream: true`), `/api/v1/models/register` (a registration, nothing downloaded) and
`/api/v1/delete`.

pull (Lemonade's server_spec):
- a catalog name installs that model (a Hugging Face checkpoint is downloaded; a
  packaged model is already installed);
- `user.NAME` with a `checkpoint` registers the model and installs it; registration
  needs the admin key for a command or a local file outside the model directories;
- a reserved prefix (`extra.`), or a new name outside `user.`, is a 400; an unknown
  name without a checkpoint is a 404.
- `stream: true`: `event: progress` (file, file_index, total_files, bytes_downloaded,
  bytes_total, percent), then `event: complete` or `event: error`.
delete: unloads the model if loaded, removes what pull downloaded and a registration;
a packaged model cannot be deleted (400); a catalog model that is not downloaded is a
404; a name no model has is a 422 (Lemonade's suite: "Should return 422 Unprocessable
Entity").
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler.api import sse
from juggler.api.streams import ClosingStreamingResponse
from juggler.errors import CheckpointMissing, ModelNotFound, render
from juggler.registry.checkpoint import LocalRef, parse_checkpoint
from juggler.registry.mmproj import projector_for
from juggler.router.core.bodies import parse
from juggler.router.core.catalog_view import model_entry
from juggler.router.core.deps import RouterState, is_admin, is_local_owner, state_of
from juggler.router.core.openapi import body_of
from juggler.router.core.pulls import (
    EventKind,
    delete_model,
    hf_ref_of,
    known_model,
    pull_events,
    run_pull,
)
from juggler.router.core.security import check_registration
from juggler.router.lemonade.schemas import DeleteRequest, PullRequest, RegisterRequest
from juggler.types import ModelInfo

router = APIRouter()


def _labels(body: PullRequest) -> tuple[str, ...]:
    labels = list(body.labels)
    for flag, label in (
        ("reasoning", "reasoning"),
        ("vision", "vision"),
        ("embedding", "embeddings"),
        ("reranking", "reranking"),
    ):
        if getattr(body, flag) and label not in labels:
            labels.append(label)
    return tuple(labels)


def _plan(
    state: RouterState, body: PullRequest, admin: bool, owner: bool
) -> tuple[Any, Callable[[], None]]:
    """What to download and what to do once it is there (register a new model)."""
    checkpoint = body.main_checkpoint()
    if not checkpoint and not body.command:
        info = known_model(state.registry, body.model_name)
        return hf_ref_of(info.checkpoint), lambda: None
    state.registry.check_new_name(body.model_name)
    check_registration(
        state.settings,
        is_admin=admin,
        is_local_owner=owner,
        recipe=body.recipe,
        checkpoint=checkpoint,
        command=body.command,
    )
    ref = None
    projector = body.projector()
    if checkpoint:
        ref = hf_ref_of(checkpoint)
        local = parse_checkpoint(checkpoint)
        if isinstance(local, LocalRef) and not local.path.is_file():
            raise CheckpointMissing(f"model file not found: {local.path}", param="checkpoint")
        if projector and ref is not None:  # fetched with the model (issue 51)
            ref = dataclasses.replace(ref, extra_files=(projector,))
        elif projector and isinstance(local, LocalRef):
            projector_for(ModelInfo(body.model_name, checkpoint, mmproj=projector), local.path)

    def register() -> None:
        state.registry.add_user_model(
            body.model_name,
            checkpoint=checkpoint,
            recipe=body.recipe,
            labels=_labels(body),
            command=body.command,
            health_path=body.health_path,
            device=body.device,
            mmproj=projector,
        )

    return ref, register


@router.post("/pull", openapi_extra=body_of(PullRequest))
async def pull(request: Request) -> Response:
    state = state_of(request)
    body, _ = await parse(request, PullRequest)
    ref, register = _plan(state, body, is_admin(request), is_local_owner(request))
    done = {"status": "success", "message": f"Installed model: {body.model_name}"}
    if not body.stream:
        await run_pull(ref, register)
        return JSONResponse(done)
    return ClosingStreamingResponse(_sse(ref, register), media_type="text/event-stream")


async def _sse(ref: Any, register: Callable[[], None]) -> AsyncIterator[bytes]:
    last: dict[str, Any] = {"file_index": 1, "total_files": 1}
    async for event in pull_events(ref, register):
        if event.kind is EventKind.PROGRESS and event.progress is not None:
            p = event.progress
            last = {"file_index": p.file_index, "total_files": p.total_files}
            yield sse.event(
                "progress",
                {
                    "file": p.file,
                    "file_index": p.file_index,
                    "total_files": p.total_files,
                    "bytes_downloaded": p.bytes_downloaded,
                    "bytes_total": p.bytes_total,
                    "percent": p.percent,
                },
            )
        elif event.kind is EventKind.COMPLETE:
            yield sse.event("complete", {**last, "percent": 100})
        elif event.error is not None:
            err = render(event.error)["error"]
            yield sse.event("error", {"error": err["message"], "code": err["code"]})


@router.post("/models/register", openapi_extra=body_of(RegisterRequest))
async def register(request: Request) -> dict[str, Any]:
    """Lemonade: "Register or update a `user.*` model definition without downloading model
    files"; pull remains the install. The same rules as pull's registration apply (name,
    recipe, who may register a local file or a command; a local file must exist)."""
    state = state_of(request)
    body, _ = await parse(request, RegisterRequest)
    checkpoint = body.main_checkpoint()
    state.registry.check_new_name(body.model_name)
    check_registration(
        state.settings,
        is_admin=is_admin(request),
        is_local_owner=is_local_owner(request),
        recipe=body.recipe,
        checkpoint=checkpoint,
        command=None,
    )
    local = parse_checkpoint(checkpoint) if checkpoint else None
    if isinstance(local, LocalRef) and not local.path.is_file():
        raise CheckpointMissing(f"model file not found: {local.path}", param="checkpoint")
    info = state.registry.add_user_model(
        body.model_name, checkpoint=checkpoint, recipe=body.recipe, labels=tuple(body.labels)
    )
    return {
        "status": "success",
        "model_name": info.name,
        "canonical_model_name": info.name,
        "model": model_entry(info, state.pins.saved_options(info.name)),
    }


class UnknownModel(ModelNotFound):
    """Lemonade's delete of a model it does not know: 422 Unprocessable Entity."""

    status = 422


@router.post("/delete", openapi_extra=body_of(DeleteRequest))
async def delete(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, DeleteRequest)
    if state.registry.find(body.model_name) is None:
        raise UnknownModel(f"model {body.model_name!r} not found", param="model_name")
    await delete_model(state, body.model_name)
    return {"status": "success", "message": f"Deleted model: {body.model_name}"}
