"""Ollama's `/api/create` and the blob upload it relies on (`HEAD`/`POST
/api/blobs/sha256:...`).

create makes a model from an existing one (`from` a name: same file), a local GGUF
(`from` a path: the security rules of registering a local file apply, see
`core/security.check_registration`) or an uploaded blob (`files`), with the rest of its
Modelfile (`create_fields`: SYSTEM, TEMPLATE, PARAMETERs, MESSAGEs, ADAPTER, LICENSE;
load parameters also become the model's saved load options). Blobs are stored in the model cache under their SHA-256, checked on
upload; an upload is not limited by `max_body_bytes` (it streams to disk) but by
`max_upload_bytes` and the free space it must leave (`uploads.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler.errors import BadRequest, CheckpointMissing
from juggler.registry.checkpoint import cache_dir
from juggler.registry.locks import disk_errors, temp_beside
from juggler.router.core.bodies import parse
from juggler.router.core.deps import RouterState, is_local_owner, state_of
from juggler.router.core.modelfiles import ModelDefaults, book_of, set_adapter
from juggler.router.core.openapi import body_of
from juggler.router.core.security import check_registration
from juggler.router.ollama import create_fields as cf
from juggler.router.ollama import wire as ol
from juggler.router.ollama.models import inferred_labels
from juggler.router.ollama.uploads import UploadBudget
from juggler.router.ollama.wire import NDJSON, line
from juggler.types import ModelInfo

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
    """Issue 52: the new model's name compares as Ollama compares names (`M1` updates
    `m1`); a model is not made `from` itself; its `parameters` pass the checks a load
    runs (a `num_ctx` past what the model was trained for is refused here, not at every
    later use). Issue 49: its SYSTEM, TEMPLATE, PARAMETERs, MESSAGEs, ADAPTER and LICENSE
    are kept (`create_fields`, `core/modelfiles`). All checked before anything is registered."""
    state = state_of(request)
    admin = is_local_owner(request)
    body, _ = await parse(request, ol.CreateBody)
    body, adapter_paths = cf.legacy_fields(body)
    ol.refuse_set({"quantize": body.quantize}, "Juggler does not quantize models")
    cf.check_requires(body.requires)
    name = state.registry.existing_name(body.model_name())
    state.registry.check_new_name(name, ollama=True)
    checkpoint = _create_source(state, body, admin)
    inherited = ModelDefaults()
    mmproj = next((b for n, b in (body.files or {}).items() if "mmproj" in n.lower()), None)
    if checkpoint is None:
        source = state.registry.lookup(str(body.from_))
        if source.name == name:
            raise BadRequest(f"from: {body.from_!r} is the model being created", param="from")
        info = dataclasses.replace(source, name=name)
        inherited = book_of(state).get(source.name)
    else:
        info = ModelInfo(name=name, checkpoint=checkpoint, labels=inferred_labels(checkpoint))
    defaults = cf.defaults_of(body, inherited)
    sources = cf.adapter_sources(body, adapter_paths)
    adapter = _adapter_file(state, sources[0], admin) if sources else inherited.adapter
    if adapter:
        await asyncio.to_thread(cf.check_fits, info, adapter)
    defaults = dataclasses.replace(defaults, adapter=adapter)
    load = cf.load_parameters(defaults)
    await _check_parameters(state, info, load)
    if checkpoint is None:
        state.registry.copy_model(source.name, name)
    else:
        state.registry.add_user_model(
            name,
            checkpoint=checkpoint,
            labels=info.labels,
            ollama=True,
            mmproj=str(blob_path(mmproj)) if mmproj else None,
        )
    state.pins.save_options(name, load)
    book_of(state).put(name, defaults)
    await set_adapter(state, name, adapter, is_admin=admin)
    if not body.stream:
        return JSONResponse({"status": "success"})
    lines = [line({"status": s}) for s in ("using existing layer", "writing manifest", "success")]
    return Response(b"".join(lines), media_type=NDJSON)


def _adapter_file(state: RouterState, source: str, admin: bool) -> str:
    """An ADAPTER's file: an uploaded blob (`sha256:...`), or an absolute path under the
    rules of registering a local file (inside the model directories, unless the request
    is the owner's)."""
    if source.startswith("@"):
        source = source[1:]
    if source.startswith("sha256"):
        path = blob_path(source)
        if not path.is_file():
            raise CheckpointMissing(f"adapters: blob {source} was not uploaded", param="adapters")
        return str(path)
    if not Path(source).expanduser().is_absolute():
        raise BadRequest(
            f"ADAPTER {source}: give an absolute path (the server does not know where the "
            "Modelfile was)",
            param="adapters",
        )
    check_registration(
        state.settings, is_admin=admin, recipe="llamacpp", checkpoint=source, command=None
    )
    return str(Path(source).expanduser().resolve())


#: Juggler's load options and the Ollama parameters they come from (for the 400's name).
_PARAMETER_OF = {
    "ctx_size": "num_ctx",
    "threads": "num_thread",
    "batch_size": "num_batch",
    "n_gpu_layers": "num_gpu",
}


async def _check_parameters(state: RouterState, info: ModelInfo, load: dict[str, Any]) -> None:
    """The checks a load of the new model with `load` runs; a 400 names the parameter."""
    if not load:
        return
    options = state.settings.model_options(None, saved=load)
    try:
        await state.manager.check_options(info, options)
    except BadRequest as exc:
        param = _PARAMETER_OF.get(exc.param or "")
        if param is None:
            raise
        raise BadRequest(
            f"parameters.{param}: {exc.message}", param=f"parameters.{param}"
        ) from None


def _create_source(state: RouterState, body: ol.CreateBody, admin: bool) -> str | None:
    """The checkpoint of the new model; None to copy the model named in `from`."""
    files = body.files or {}
    if files and body.from_:
        raise BadRequest("give from or files, not both", param="from")
    if files:
        models = {n: d for n, d in files.items() if "mmproj" not in n.lower()}
        if len(models) != 1 or len(files) > 2:
            raise BadRequest(
                "give one GGUF file, and at most one vision projector (mmproj*.gguf)",
                param="files",
            )
        paths = {}
        for name, digest in files.items():
            if not name.endswith(".gguf"):
                raise BadRequest(f"{name!r}: only GGUF files are supported", param="files")
            path = blob_path(digest)
            if not path.is_file():
                raise CheckpointMissing(f"blob {digest} was not uploaded", param="files")
            paths[name] = str(path)
        return paths[next(iter(models))]
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
