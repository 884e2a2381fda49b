"""Seed 002's soft idle over HTTP: `POST /internal/downsize`, and the `memory` part of
/health that tells the router what a downsize would give back.

The router's manager asks for a downsize only when the backend is idle; each worker
parks its sessions and cached prefixes in host memory and frees its llama.cpp context
(see `worker.downsize`). Freed C heap is then handed back to the system (`malloc_trim`),
so that the drop shows in the process's resident memory, which is what users and the
memory monitor see. The next request makes the contexts again (see `worker.downsize`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from typing import Any

from juggler.engine.runtime import Engine
from juggler.engine.schedule.messages import Downsize
from juggler.engine.worker.context_slot import rss_bytes

log = logging.getLogger(__name__)


def _trim_heap() -> None:
    """Give freed C heap back to the system (glibc keeps it otherwise)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


async def downsize(engine: Engine) -> dict[str, Any]:
    """Downsize every worker; answers what was freed, measured."""
    if not engine.is_llm or engine.master is None or engine.loop is None:
        return {"downsized": False, "reason": f"a {engine.config.type} backend does not downsize"}
    before = rss_bytes()
    replies = []
    for i in range(len(engine.workers)):
        reply: asyncio.Future[dict[str, Any]] = engine.loop.create_future()
        engine.master.submit(Downsize(i, reply))
        replies.append(reply)
    answers: list[dict[str, Any]] = list(await asyncio.gather(*replies))
    await asyncio.to_thread(_trim_heap)
    after = rss_bytes()
    done = all(a.get("downsized") for a in answers)
    log.info("downsize: rss %d -> %d MiB", before >> 20, after >> 20)
    body: dict[str, Any] = {
        "downsized": done,
        "context_bytes": sum(a.get("context_bytes", 0) for a in answers),
        # Issue 48: "downsize frees VRAM, and says how much".
        "vram_bytes": sum(a.get("vram_bytes", 0) for a in answers),
        "sessions_parked": sum(a.get("sessions_parked", 0) for a in answers),
        "rss_before_bytes": before,
        "rss_after_bytes": after,
    }
    if not done:
        body["reason"] = next((a["reason"] for a in answers if "reason" in a), "busy")
    return body


def memory_body(engine: Engine) -> dict[str, Any]:
    """/health's `memory`: resident memory now, what the contexts hold (a downsize frees
    that), whether they are freed, and the restores so far."""
    snaps = engine.worker_snapshots() if engine.is_llm else []
    restores = sum(s.num_restores for s in snaps)
    return {
        "rss_bytes": rss_bytes(),
        "context_bytes": sum(s.context_bytes for s in snaps),
        "context_vram_bytes": sum(n for s in snaps for _, n in s.context_devices),
        "downsized": bool(snaps) and all(s.is_downsized for s in snaps),
        "restores": restores,
        "last_restore_ms": round(max((s.last_restore_s for s in snaps), default=0.0) * 1e3, 1),
    }
