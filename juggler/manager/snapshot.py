"""Immutable views of the residency table, for routes (`/health`, `/internal/*`, CLI)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from juggler.manager.options import ResolvedOptions
from juggler.types import Device, ModelType


class ServerState(enum.Enum):
    """Lifecycle of one WrappedServer. Allowed transitions:

        loading  -> ready      the backend answered its health check
        loading  -> failed     it exited, timed out or could not start (terminal)
        ready    -> evicting   chosen as a victim, unloaded, or the manager stops
        ready    -> dead       its process exited on its own (terminal; slot freed)
        evicting -> stopped    its process group is gone (terminal)

    Only the manager's owner task changes a server's state.
    """

    LOADING = "loading"
    READY = "ready"
    EVICTING = "evicting"
    STOPPED = "stopped"
    FAILED = "failed"
    DEAD = "dead"


@dataclass(frozen=True)
class ServerSnapshot:
    """A copy of one WrappedServer at one moment; safe to keep and read anywhere."""

    model_name: str
    checkpoint: str
    type: ModelType
    device: Device
    recipe: str
    backend_url: str
    pid: int | None
    last_use: float
    pinned: bool
    status: ServerState
    in_flight: int
    options: ResolvedOptions
    #: How many times this model has been loaded since the manager started.
    num_loads: int = 1
    load_duration_s: float | None = None

    @property
    def is_busy(self) -> bool:
        return self.in_flight > 0

    def to_health(self) -> dict[str, Any]:
        """Lemonade's `all_models_loaded` entry."""
        return {
            "model_name": self.model_name,
            "checkpoint": self.checkpoint,
            "last_use": self.last_use,
            "type": self.type.value,
            "device": self.device.label(),
            "recipe": self.recipe,
            "recipe_options": self.options.recipe_options(),
            "backend_url": self.backend_url,
            "pid": self.pid,
            "pinned": self.pinned,
            "status": self.status.value,
            "is_busy": self.is_busy,
            "in_flight": self.in_flight,
            "num_loads": self.num_loads,
        }
