"""Installing and removing models, shared by Lemonade's routes and Ollama's: pulls as a
stream of events (Lemonade's `/api/v1/pull` words them as SSE, Ollama's `/api/pull` as
NDJSON), and `delete_model` (`/api/v1/delete`, `/api/delete`).

`pull_events(ref)` runs the download (`registry.download`, blocking) in a thread and
yields `progress` events (at most every `PROGRESS_EVERY_S`, and whenever the percentage
moves), then one `complete` or `error` event. Runs on the router's event loop; the
thread reports through `loop.call_soon_threadsafe`. A consumer that stops early (its
client went away) cancels the download at its next chunk; what arrived stays in the
partial file, and the next pull resumes from there. Concurrent pulls of one file
coalesce in the registry's lock: the second waits, then finds the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from juggler.errors import BadRequest, JugglerError, ModelNotFound
from juggler.registry.aliases import reserved_reason
from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import HfRef, is_available, parse_checkpoint, remove_downloaded
from juggler.registry.download import Progress, download
from juggler.registry.folders import is_found
from juggler.router.core import modelfiles
from juggler.router.core.deps import RouterState
from juggler.types import ModelInfo

PROGRESS_EVERY_S = 0.25


class EventKind(enum.Enum):
    PROGRESS = "progress"
    COMPLETE = "complete"
    ERROR = "error"


@dataclass(frozen=True)
class PullEvent:
    kind: EventKind
    progress: Progress | None = None
    error: JugglerError | None = None


class _Cancelled(Exception):
    """The consumer went away: stop downloading (the partial file stays)."""


def hf_ref_of(checkpoint: str) -> HfRef | None:
    """The Hugging Face reference to download for a checkpoint; None when it needs no
    download (a local file or a package's file)."""
    try:
        ref = parse_checkpoint(checkpoint)
    except ValueError as exc:
        raise BadRequest(str(exc), param="checkpoint") from None
    return ref if isinstance(ref, HfRef) else None


def known_model(registry: Registry, name: str, *, ollama: bool = False) -> ModelInfo:
    """The model a pull by name installs: reserved prefixes are a 400, an unknown name a
    404 (`model_not_found`)."""
    if (why := reserved_reason(name)) and registry.find(name) is None:
        raise BadRequest(f"{name!r}: {why}", param="model_name")
    return registry.lookup(name) if ollama else registry.get(name)


async def pull_events(
    ref: HfRef | None, on_complete: Callable[[], None] | None = None
) -> AsyncIterator[PullEvent]:
    """Download `ref` (nothing to do when None), then run `on_complete` (registration),
    yielding what happens. Never raises: failures are the final `error` event."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Progress] = asyncio.Queue()
    cancelled = False

    def on_progress(p: Progress) -> None:  # the download thread
        if cancelled:
            raise _Cancelled
        loop.call_soon_threadsafe(queue.put_nowait, p)

    work = asyncio.ensure_future(
        asyncio.to_thread(download, ref, on_progress=on_progress) if ref else _nothing()
    )
    last_sent, last_pct = 0.0, -1
    finished = False
    try:
        while not work.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getter
                continue
            p = getter.result()
            now = time.monotonic()
            if p.percent != last_pct or now - last_sent >= PROGRESS_EVERY_S:
                last_sent, last_pct = now, p.percent
                yield PullEvent(EventKind.PROGRESS, progress=p)
        try:
            await work
            if on_complete is not None:
                on_complete()
        except JugglerError as exc:
            finished = True
            yield PullEvent(EventKind.ERROR, error=exc)
            return
        finished = True
        yield PullEvent(EventKind.COMPLETE)
    finally:
        if not finished:
            cancelled = True  # the consumer left: the thread stops at its next chunk
            if not work.done():
                work.add_done_callback(_swallow)


async def _nothing() -> None:
    return None


def _swallow(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it


async def run_pull(ref: HfRef | None, on_complete: Callable[[], None] | None = None) -> None:
    """A pull without a stream: returns when done, raises its error."""
    async for event in pull_events(ref, on_complete):
        if event.kind is EventKind.ERROR and event.error is not None:
            raise event.error


async def delete_model(state: RouterState, name: str, *, ollama: bool = False) -> str:
    """Unload `name` if loaded, remove its downloaded files and its registration (shared
    by Lemonade's delete and Ollama's). Returns the canonical name."""
    registry = state.registry
    info = registry.lookup(name) if ollama else registry.get(name)
    if is_found(info):
        raise BadRequest(
            f"{info.name} is a file in the model folders, which only you manage: delete "
            f"the file itself ({info.checkpoint})",
            param="model_name",
        )
    builtin = registry.is_builtin(info.name)
    if builtin and hf_ref_of(info.checkpoint) is None:
        raise BadRequest(f"{info.name} is packaged with Juggler and cannot be deleted")
    if builtin and not is_available(info):
        raise ModelNotFound(f"model {info.name!r} is not downloaded", param="model_name")
    if any(s.model_name == info.name for s in state.manager.snapshot()):
        await state.manager.unload(info.name)
    if not registry.uses_checkpoint(info.checkpoint, besides=info.name):
        await asyncio.to_thread(remove_downloaded, info.checkpoint)
    if not builtin:
        registry.remove_user_model(info.name)
    state.pins.drop(info.name)
    await modelfiles.forget(state, info.name)  # an Ollama Modelfile's defaults and adapter
    return info.name
