"""A Lease: one inference request's hold on a ready backend (busy protection)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from juggler.types import Device, ModelInfo, ModelType


class Lease:
    """Returned by `Manager.acquire`. While it is held the server counts one request in
    flight and cannot be evicted. `release()` ends the hold (in-flight -1, last use
    refreshed: the request's completion); it is idempotent and may be called from any
    coroutine on the manager's loop (or, less cheaply, from another thread).

        async with await manager.acquire(name) as lease:
            ... stream to lease.backend_url ...
    """

    __slots__ = (
        "_hooks",
        "_on_release",
        "backend_url",
        "device",
        "info",
        "is_released",
        "model_name",
        "pid",
        "server_id",
        "type",
    )

    def __init__(
        self,
        *,
        server_id: int,
        info: ModelInfo,
        backend_url: str,
        pid: int | None,
        device: Device,
        on_release: Callable[[int], None],
    ) -> None:
        self.server_id = server_id
        self.info = info
        self.model_name = info.name
        self.type: ModelType = info.type
        self.backend_url = backend_url
        self.pid = pid
        self.device = device
        self.is_released = False
        self._on_release = on_release
        self._hooks: list[Callable[[], None]] = []

    def on_release(self, hook: Callable[[], None]) -> None:
        """Also call `hook` when the lease is released (the request is over)."""
        self._hooks.append(hook)

    def release(self) -> None:
        if self.is_released:
            return
        self.is_released = True
        self._on_release(self.server_id)
        for hook in self._hooks:
            hook()

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.is_released else "held"
        return f"<Lease {self.model_name} {self.backend_url} pid={self.pid} {state}>"
