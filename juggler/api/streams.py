"""A streamed HTTP answer that ends its body generator the moment the answer ends.

Starlette's `StreamingResponse` stops iterating its body when the client disconnects, but
when the disconnect lands while a chunk is being sent, the body generator stays
suspended at its `yield`: its `finally` (which cancels the generation in a backend, or
closes the backend response in the router) runs only when the garbage collector finds
the generator, which for an object in a reference cycle can be minutes later. A loaded
test run caught a LoRA adapter slot held for 60 s that way. `ClosingStreamingResponse`
closes the body itself after the answer, however it ended, so a client that leaves
frees what its answer held at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class ClosingStreamingResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await close_body(self.body_iterator)


async def close_body(body: Any) -> None:
    """`aclose()` an async generator (a no-op for one already finished, and for bodies
    that are not generators)."""
    aclose = getattr(body, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def stop(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait for it to end, without swallowing a cancellation of the
    caller (as suppressing the task's CancelledError would)."""
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
