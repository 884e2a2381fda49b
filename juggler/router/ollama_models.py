"""Ollama's model routes: `/api/version`, `/api/tags`, `/api/ps`, `/api/show`,
`/api/pull` (NDJSON progress), `/api/delete`, `/api/copy`, `/api/create`, and the blob
upload `/api/create` relies on (`HEAD`/`POST /api/blobs/sha256:...`).

Names: Juggler's catalog names, with Ollama's `:latest` tag when they have none
(`Registry.find` accepts both); `hf.co/org/repo:QUANT` pulls a Hugging Face GGUF under
that name. `/api/create` makes a model from an existing one (`from`), a local GGUF
(`from` a path: the security rules of registering a local file apply, see
`security.check_registration`) or an uploaded blob (`files`); its `parameters` become
the new model's saved load options. Pulls and deletes are the Lemonade routes' own
(`pulls`, `model_routes.delete_model`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from juggler import __version__
from juggler.api import ollama as ol
from juggler.errors import BadRequest, CheckpointMissing, NotFound, NotImplementedParam
from juggler.manager.snapshot import ServerState
from juggler.registry.catalog import hf_alias_checkpoint
from juggler.registry.checkpoint import cache_dir, is_available, local_file
from juggler.registry.gguf_meta import GgufError, labels_of, read_info
from juggler.registry.locks import disk_errors, temp_beside
from juggler.router.bodies import parse
from juggler.router.catalog_view import FileFacts, file_facts
from juggler.router.deps import RouterState, state_of
from juggler.router.model_routes import delete_model, is_admin
from juggler.router.ollama_routes import NDJSON, _line
from juggler.router.openapi import body_of
from juggler.router.pulls import EventKind, hf_ref_of, known_model, pull_events
from juggler.router.security import check_registration
from juggler.types import ModelInfo, ModelType

router = APIRouter()
_STARTED = time.time()
_DIGEST = re.compile(r"^sha256[:-](?P<hex>[0-9a-f]{64})$")


def details(info: ModelInfo, facts: FileFacts) -> dict[str, Any]:
    g = facts.gguf
    return {
        "parent_model": "",
        "format": "gguf",
        "family": g.architecture if g else "",
        "families": [g.architecture] if g else None,
        "parameter_size": g.parameter_size if g else "",
        "quantization_level": g.file_type or "" if g else "",
    }


@router.get("/api/version")
async def version() -> dict[str, str]:
    return {"version": ol.API_VERSION, "juggler": __version__}


@router.get("/api/tags")
async def tags(request: Request) -> dict[str, Any]:
    """The models on disk (Ollama's local models)."""
    models = []
    for info in state_of(request).registry.list():
        if not is_available(info):
            continue
        facts = await asyncio.to_thread(file_facts, info)
        name = ol.ollama_name(info.name)
        models.append(
            {
                "name": name,
                "model": name,
                "modified_at": ol.iso_at(facts.modified_at or _STARTED),
                "size": facts.size_bytes or int((info.size_gb or 0) * 1e9),
                "digest": facts.digest,
                "details": details(info, facts),
            }
        )
    return {"models": models}


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    """The loaded models; `expires_at` is when an idle model would be unloaded."""
    state = state_of(request)
    memory = state.manager.memory_status()
    models = []
    for snap in state.manager.snapshot():
        if snap.status is not ServerState.READY:
            continue
        info = state.registry.get(snap.model_name)
        facts = await asyncio.to_thread(file_facts, info)
        opted_in = snap.auto_evict or bool(memory and memory.auto_evict)
        ttl = snap.options.evict_idle_timeout if opted_in else ol.KEEP_S
        name = ol.ollama_name(snap.model_name)
        models.append(
            {
                "name": name,
                "model": name,
                "size": facts.size_bytes or 0,
                "digest": facts.digest,
                "details": details(info, facts),
                "expires_at": ol.iso_at(snap.last_use + min(ttl, ol.KEEP_S)),
                "size_vram": 0 if snap.device.label() == "cpu" else facts.size_bytes or 0,
                "context_length": snap.options.ctx_size,
            }
        )
    return {"models": models}


@router.post("/api/show", openapi_extra=body_of(ol.NameBody))
async def show(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, ol.NameBody)
    info = state.registry.find(body.model_name())
    facts = await asyncio.to_thread(file_facts, info)
    if facts.path is None:
        raise NotFound(f"model {info.name!r} is not downloaded; pull it first")
    saved = state.pins.saved_options(info.name)
    params = [f"num_ctx {saved['ctx_size']}"] if "ctx_size" in saved else []
    meta = facts.gguf.metadata if facts.gguf else {}
    model_info = {k: v for k, v in meta.items() if not isinstance(v, str) or len(v) < 256}
    return {
        "modelfile": "\n".join([f"FROM {info.checkpoint}", *(f"PARAMETER {p}" for p in params)]),
        "parameters": "\n".join(params),
        "template": str(meta.get("tokenizer.chat_template", "")),
        "details": details(info, facts),
        "model_info": model_info,
        "capabilities": ["embedding"] if info.type is ModelType.EMBEDDING else ["completion"],
        "modified_at": ol.iso_at(facts.modified_at or 0),
    }


@router.post("/api/pull", openapi_extra=body_of(ol.PullBody))
async def pull(request: Request) -> Response:
    state = state_of(request)
    body, _ = await parse(request, ol.PullBody)
    name = body.model_name()
    ol.refuse_set({"insecure": body.insecure}, "downloads always verify the hub")
    checkpoint = hf_alias_checkpoint(name)
    register: Any = None
    if checkpoint is not None and not _known(state, name):
        state.registry.check_new_name(name, ollama=True)
        ref = hf_ref_of(checkpoint)

        def register() -> None:
            state.registry.add_user_model(
                name, checkpoint=checkpoint, labels=inferred_labels(checkpoint), ollama=True
            )

    else:
        ref = hf_ref_of(known_model(state.registry, name, ollama=True).checkpoint)
    if not body.stream:
        async for event in pull_events(ref, register):
            if event.error is not None:
                raise event.error
        return JSONResponse({"status": "success"})
    return StreamingResponse(_pull_lines(ref, register), media_type=NDJSON)


def inferred_labels(checkpoint: str) -> tuple[str, ...]:
    """Ollama names carry no labels: the GGUF tells an embedding model from a chat one."""
    path = local_file(ModelInfo(name="", checkpoint=checkpoint))
    if path is None:
        return ()
    try:
        return labels_of(read_info(path))
    except (GgufError, OSError):
        return ()


def _known(state: RouterState, name: str) -> bool:
    try:
        state.registry.find(name)
    except NotFound:
        return False
    return True


async def _pull_lines(ref: Any, register: Any) -> AsyncIterator[bytes]:
    yield _line({"status": "pulling manifest"})
    async for event in pull_events(ref, register):
        if event.kind is EventKind.PROGRESS and event.progress is not None:
            p = event.progress
            digest = f"sha256:{p.digest}" if p.digest else p.file
            yield _line(
                {
                    "status": f"pulling {(p.digest or p.file)[:12]}",
                    "digest": digest,
                    "total": p.bytes_total or 0,
                    "completed": p.bytes_downloaded,
                }
            )
        elif event.kind is EventKind.COMPLETE:
            for status in ("verifying sha256 digest", "writing manifest", "success"):
                yield _line({"status": status})
        elif event.error is not None:
            yield _line({"error": event.error.message})


@router.delete("/api/delete", openapi_extra=body_of(ol.NameBody))
async def delete(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, ol.NameBody)
    await delete_model(state, body.model_name(), ollama=True)
    return {"status": "success"}


@router.post("/api/copy", openapi_extra=body_of(ol.CopyBody))
async def copy(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, ol.CopyBody)
    source = state.registry.find(body.source)
    state.registry.copy_model(source.name, body.destination)
    saved = state.pins.saved_options(source.name)
    if saved:
        state.pins.save_options(body.destination, saved)
    return {"status": "success"}


# -- create and blobs ----------------------------------------------------------------------
def blob_path(digest: str) -> Path:
    match = _DIGEST.match(digest)
    if match is None:
        raise BadRequest(f"{digest!r} is not a sha256:<64 hex digits> digest", param="digest")
    return cache_dir() / "blobs" / f"sha256-{match['hex']}.gguf"


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


@router.post("/api/blobs/{digest}", openapi_extra=_BINARY_BODY)
async def blob_upload(digest: str, request: Request) -> Response:
    """Store an uploaded file in the model cache under its SHA-256 (checked)."""
    target = blob_path(digest)
    if target.is_file():
        return Response(status_code=200)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = temp_beside(target)
    h = hashlib.sha256()
    try:
        with disk_errors(str(target)), partial.open("wb") as f:
            async for chunk in request.stream():
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
    sampling, load = ol.split_options(body.parameters)
    if sampling:
        raise NotImplementedParam(
            f"parameters.{next(iter(sampling))}", "models keep load options only, not sampling"
        )
    state.registry.check_new_name(body.model, ollama=True)
    checkpoint = _create_source(state, body, is_admin(request))
    if checkpoint is None:
        state.registry.copy_model(str(body.from_), body.model)
    else:
        labels = inferred_labels(checkpoint)
        state.registry.add_user_model(body.model, checkpoint=checkpoint, labels=labels, ollama=True)
    if load:
        state.pins.save_options(body.model, load)
    if not body.stream:
        return JSONResponse({"status": "success"})
    lines = [_line({"status": s}) for s in ("using existing layer", "writing manifest", "success")]
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
    state.registry.find(source)  # 404 for an unknown source model
    return None
