"""Ollama's `/api/create` and the blob upload it relies on (`HEAD`/`POST
/api/blobs/sha256:...`).

create makes a model from an existing one (`from` a name: same file), a local GGUF
(`from` a path: the security rules of registering a local file apply, see
`core/security.check_registration`) or an uploaded blob (`files`); its `parameters`
become the new model's saved load options (sampling parameters, system prompts and templates are
not kept: 400). Blobs are stored in the model cache under their SHA-256, checked on
upload; an upload is not limited by `max_body_bytes` (it streams to disk) but by
`max_upload_bytes` and the free space it must leave (`uploads.py`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler.errors import BadRequest, CheckpointMissing, NotImplementedParam
from juggler.registry.checkpoint import cache_dir
from juggler.registry.locks import disk_errors, temp_beside
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, is_local_owner, state_of
from juggler.router.core.openapi import body_of
from juggler.router.core.security import check_registration
from juggler.router.ollama import options as oo
from juggler.router.ollama import wire as ol
from juggler.router.ollama.models import inferred_labels
from juggler.router.ollama.uploads import UploadBudget
from juggler.router.ollama.wire import NDJSON, line

router = APIRouter()
_DIGEST = re.compile(r"^sha256[:-](?P<hex>[0-9a-f]{64})$")


def blob_path(digest: str) -> Path:
    match = _DIGEST.match(digest)
    if match is None:
        raise BadRequest(f"{digest!r} is not a sha256:<64 hex digits> digest", param="digest")
    return cache_dir() / "blobs" / f"sha256-{match['hex']}.gguf"


def _free(directory: Path) -> int:
    return shutil.disk_usage(directory).free


@router.head("/api/blobs/{digest}")
async def blob_exists(digest: str) -> Response:
    found = blob_path(digest).is_file()
    return Response(status_code=200 if found else 404)


_BINARY_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


@router.post("/api/blobs/{digest}", openapi_extra=_BINARY_BODY)
async def blob_upload(digest: str, request: Request) -> Response:
    """Store an uploaded file in the model cache under its SHA-256 (checked), within
    `max_upload_bytes` and the disk's free space (`uploads`); a refused or failed
    upload leaves no file behind."""
    target = blob_path(digest)
    if target.is_file():
        return Response(status_code=200)
    target.parent.mkdir(parents=True, exist_ok=True)
    budget = UploadBudget(state_of(request).settings.max_upload_bytes, _free(target.parent))
    budget.check_declared(_declared_length(request))
    partial = temp_beside(target)
    h = hashlib.sha256()
    try:
        with disk_errors(str(target)), partial.open("wb") as f:
            async for chunk in request.stream():
                if budget.take(len(chunk)):
                    f.flush()
                    budget.recheck(_free(target.parent))
                h.update(chunk)
                f.write(chunk)
        if f"sha256:{h.hexdigest()}" != digest.replace("-", ":", 1):
            raise BadRequest("the uploaded file does not match its digest", param="digest")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return Response(status_code=201)


@router.post("/api/create", openapi_extra=body_of(ol.CreateBody))
async def create(request: Request) -> Response:
    state = state_of(request)
    body, _ = await parse(request, ol.CreateBody)
    ol.refuse_set(
        {
            "quantize": body.quantize,
            "adapters": body.adapters,
            "template": body.template,
            "license": body.license,
            "system": body.system,
            "messages": body.messages,
        },
        "/api/create makes models from GGUF files and load parameters only",
    )
    sampling, load = oo.split_options(body.parameters)
    if sampling:
        raise NotImplementedParam(
            f"parameters.{next(iter(sampling))}", "models keep load options only, not sampling"
        )
    state.registry.check_new_name(body.model, ollama=True)
    checkpoint = _create_source(state, body, is_local_owner(request))
    if checkpoint is None:
        state.registry.copy_model(str(body.from_), body.model)
    else:
        labels = inferred_labels(checkpoint)
        state.registry.add_user_model(body.model, checkpoint=checkpoint, labels=labels, ollama=True)
    if load:
        state.pins.save_options(body.model, load)
    if not body.stream:
        return JSONResponse({"status": "success"})
    lines = [line({"status": s}) for s in ("using existing layer", "writing manifest", "success")]
    return Response(b"".join(lines), media_type=NDJSON)


def _create_source(state: RouterState, body: ol.CreateBody, admin: bool) -> str | None:
    """The checkpoint of the new model; None to copy the model named in `from`."""
    files = body.files or {}
    if files and body.from_:
        raise BadRequest("give from or files, not both", param="from")
    if files:
        if len(files) != 1:
            raise BadRequest("give exactly one GGUF file", param="files")
        name, digest = next(iter(files.items()))
        if not name.endswith(".gguf"):
            raise BadRequest(f"{name!r}: only GGUF files are supported", param="files")
        path = blob_path(digest)
        if not path.is_file():
            raise CheckpointMissing(f"blob {digest} was not uploaded", param="files")
        return str(path)
    if not body.from_:
        raise BadRequest("from or files is required", param="from")
    source = body.from_
    if source.startswith(("/", "./", "~")) or source.endswith(".gguf"):
        check_registration(
            state.settings, is_admin=admin, recipe="llamacpp", checkpoint=source, command=None
        )
        if not Path(source).expanduser().is_file():
            raise CheckpointMissing(f"model file not found: {source}", param="from")
        return str(Path(source).expanduser().resolve())
    state.registry.lookup(source)  # 404 for an unknown source model
    return None
