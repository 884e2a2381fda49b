"""Ollama's model routes: `/api/version`, `/api/tags`, `/api/ps`, `/api/show`,
`/api/pull` (NDJSON progress), `/api/delete`, `/api/copy`; `/api/push` is 501 (no
registry to push to). (`/api/create` and its blob uploads: `create`.)

Names: Juggler's catalog names, with Ollama's `:latest` tag when they have none
(`Registry.find` accepts both); `hf.co/org/repo:QUANT` pulls a Hugging Face GGUF under
that name. Pulls and deletes are the ones Lemonade's routes make (`core/pulls.py`:
`pull_events`, `delete_model`), worded Ollama's way.

Every model `/api/tags` lists answers `/api/show` (clients such as llm-ollama call show
for each listed model): a packaged model that is not assembled yet is assembled by show
(`shown_facts`), so show always describes the real GGUF.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from juggler import __version__
from juggler.api.streams import ClosingStreamingResponse
from juggler.errors import NotFound, NotSupported
from juggler.manager.snapshot import ServerState
from juggler.manager.vram import shown_bytes
from juggler.registry.catalog import hf_alias_checkpoint
from juggler.registry.checkpoint import (
    PackageRef,
    is_available,
    local_file,
    parse_checkpoint,
    resolve_checkpoint,
)
from juggler.registry.gguf_meta import GgufError, labels_of, read_info
from juggler.registry.mmproj import takes_images
from juggler.router.core.bodies import parse
from juggler.router.core.catalog_view import FileFacts, file_facts, listed_labels
from juggler.router.core.deps import RouterState, state_of
from juggler.router.core.modelfiles import book_of, set_adapter
from juggler.router.core.openapi import body_of
from juggler.router.core.pulls import EventKind, delete_model, hf_ref_of, known_model, pull_events
from juggler.router.ollama import modelfile as mf
from juggler.router.ollama import options as oo
from juggler.router.ollama import wire as ol
from juggler.router.ollama.wire import NDJSON, line
from juggler.types import ModelInfo, ModelType

router = APIRouter()
_STARTED = time.time()


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


def shown_name(info: ModelInfo) -> str:
    """A model's name as Ollama lists it: a GGUF found in the model folders under its
    Ollama name (`Qwen3-8B:Q4_K_M`, `registry.folders`), any other with a tag."""
    return info.extra.get("ollama_name") or ol.ollama_name(info.name)


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
        name = shown_name(info)
        models.append(
            {
                "name": name,
                "model": name,
                "modified_at": ol.iso_at(facts.modified_at or _STARTED),
                "size": facts.size_bytes or int((info.size_gb or 0) * 1e9),
                "digest": digest_of(info, facts),
                "details": details(info, facts),
            }
        )
    return {"models": models}


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    """The loaded models; `expires_at` is when an idle model would be unloaded."""
    state = state_of(request)
    memory = state.manager.memory_status()
    per_pid = await state.manager.vram.per_pid()
    models = []
    for snap in state.manager.snapshot():
        if snap.status is not ServerState.READY:
            continue
        info = state.registry.get(snap.model_name)
        facts = await asyncio.to_thread(file_facts, info)
        opted_in = snap.auto_evict or bool(memory and memory.auto_evict)
        ttl = snap.options.evict_idle_timeout if opted_in else oo.KEEP_S
        name = shown_name(info)
        models.append(
            {
                "name": name,
                "model": name,
                "size": facts.size_bytes or 0,
                "digest": digest_of(info, facts),
                "details": details(info, facts),
                "expires_at": ol.iso_at(snap.last_use + min(ttl, oo.KEEP_S)),
                # What the backend holds on the GPU, as health shows it (issue 48).
                "size_vram": shown_bytes(snap.gpu, snap.pid, per_pid)[0],
                "context_length": snap.options.ctx_size,
            }
        )
    return {"models": models}


def capabilities(
    kind: ModelType, labels: tuple[str, ...] = (), *, vision: bool = False
) -> list[str]:
    """Ollama's capability list: every chat model calls tools (Juggler's generic tool
    format works with any chat template); `vision` with a projector (issue 51), `thinking`
    for a reasoning one (issue 49); no insert (suffix)."""
    if kind is ModelType.EMBEDDING:
        return ["embedding"]
    if kind is not ModelType.LLM:
        return ["completion"]
    thinks = ["thinking"] if "reasoning" in labels else []
    return ["completion", "tools", *(["vision"] if vision else []), *thinks]


def shown_facts(info: ModelInfo) -> FileFacts:
    """The file facts `/api/show` answers with. A model `/api/tags` lists always has an
    answer: a packaged model not assembled yet is assembled now (once, under a second:
    what its first load would do), so show describes the real GGUF; a model with no
    file (a `command` model) is described from its catalog entry. Raises NotFound for
    a model that is not on disk (a catalog model not pulled yet)."""
    facts = file_facts(info)
    if facts.path is not None:
        return facts
    if not is_available(info):
        raise NotFound(f"model {info.name!r} is not downloaded; pull it first")
    if info.checkpoint and isinstance(parse_checkpoint(info.checkpoint), PackageRef):
        resolve_checkpoint(info)
        return file_facts(info)
    return facts


def digest_of(info: ModelInfo, facts: FileFacts) -> str:
    """Ollama's `digest`: the file's version, or, before a packaged model is assembled
    (and for a model with no file), its checkpoint's. Clients take names that share a
    digest for one model (llm-ollama does), so two models never share one by chance."""
    if facts.path is not None:
        return facts.digest
    key = f"{info.recipe}:{info.checkpoint}:{info.command or ''}"
    return hashlib.sha256(key.encode()).hexdigest()


@router.post("/api/show", openapi_extra=body_of(ol.NameBody))
async def show(request: Request) -> dict[str, Any]:
    state = state_of(request)
    body, _ = await parse(request, ol.NameBody)
    info = state.registry.lookup(body.model_name())
    facts = await asyncio.to_thread(shown_facts, info)
    meta = facts.gguf.metadata if facts.gguf else {}
    model_info = {k: v for k, v in meta.items() if not isinstance(v, str) or len(v) < 256}
    return {
        **shown_modelfile(state, info, str(meta.get("tokenizer.chat_template", ""))),
        "details": details(info, facts),
        "model_info": model_info,
        "capabilities": capabilities(
            info.type, tuple(listed_labels(info, facts)), vision=takes_images(info)
        ),
        "modified_at": ol.iso_at(facts.modified_at or _STARTED),
    }


def shown_modelfile(state: RouterState, info: ModelInfo, chat_template: str) -> dict[str, Any]:
    """`/api/show`'s Modelfile fields: a created model's SYSTEM, TEMPLATE (else the GGUF's
    chat template), PARAMETERs (else its saved context size), MESSAGEs, LICENSE, and the
    Modelfile that makes it."""
    d = book_of(state).get(info.name)
    params = dict(d.parameters)
    saved = state.pins.saved_options(info.name)
    if "ctx_size" in saved:
        params.setdefault("num_ctx", saved["ctx_size"])
    text = mf.modelfile_text(
        shown_name(info),
        info.checkpoint,
        template=d.template,
        system=d.system,
        params=params,
        adapter=d.adapter,
        licenses=d.license,
        messages=d.messages,
    )
    out: dict[str, Any] = {
        "modelfile": text,
        "parameters": mf.parameters_text(params),
        "template": d.template or chat_template,
    }
    if d.system:
        out["system"] = d.system
    if d.license:
        out["license"] = "\n".join(d.license)
    if d.messages:
        out["messages"] = d.messages
    return out


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
    return ClosingStreamingResponse(_pull_lines(ref, register), media_type=NDJSON)


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
        state.registry.lookup(name)
    except NotFound:
        return False
    return True


async def _pull_lines(ref: Any, register: Any) -> AsyncIterator[bytes]:
    yield line({"status": "pulling manifest"})
    async for event in pull_events(ref, register):
        if event.kind is EventKind.PROGRESS and event.progress is not None:
            p = event.progress
            digest = f"sha256:{p.digest}" if p.digest else p.file
            yield line(
                {
                    "status": f"pulling {(p.digest or p.file)[:12]}",
                    "digest": digest,
                    "total": p.bytes_total or 0,
                    "completed": p.bytes_downloaded,
                }
            )
        elif event.kind is EventKind.COMPLETE:
            for status in ("verifying sha256 digest", "writing manifest", "success"):
                yield line({"status": status})
        elif event.error is not None:
            yield line({"error": event.error.message})


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
    source = state.registry.lookup(body.source)
    destination = state.registry.existing_name(body.destination)  # as Ollama compares
    state.registry.copy_model(source.name, destination)
    saved = state.pins.saved_options(source.name)
    if saved:
        state.pins.save_options(destination, saved)
    defaults = book_of(state).get(source.name)  # the Modelfile's part, as Ollama copies it
    book_of(state).put(destination, defaults)
    await set_adapter(state, destination, defaults.adapter, is_admin=True)
    return {"status": "success"}


@router.post("/api/push", include_in_schema=False)
async def push() -> None:
    """Ollama's push uploads a model to a registry; Juggler has none to push to. As
    Lemonade (ollama.md: "`POST /api/push` | Not supported | Returns 501"). Kept out of
    the API document, as the other refusals of routes Juggler does not build are."""
    raise NotSupported("push is not supported: Juggler has no model registry to push to")
