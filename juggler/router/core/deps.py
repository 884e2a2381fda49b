"""The router's shared objects, hung on `app.state.juggler` at startup, and what the
middleware decided about a request (`is_admin`, `is_local_owner`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from juggler.config import Settings
from juggler.logbook import LogBook
from juggler.manager.manager import Manager
from juggler.registry.catalog import Registry
from juggler.router.core.adapters import Adapters
from juggler.router.core.figures import FiguresPoller
from juggler.router.core.pins import PinBook
from juggler.router.core.proxy import Proxy
from juggler.router.core.tables import ResponseTable, SessionTable


@dataclass
class RouterState:
    settings: Settings
    registry: Registry
    manager: Manager
    proxy: Proxy
    pins: PinBook
    figures: FiguresPoller
    adapters: Adapters
    logs: LogBook = field(default_factory=LogBook)
    sessions: SessionTable = field(default_factory=lambda: SessionTable())
    responses: ResponseTable = field(default_factory=lambda: ResponseTable())


def state_of(request: Request) -> RouterState:
    state: RouterState = request.app.state.juggler
    return state


def is_admin(request: Request) -> bool:
    """Whether the request carried the admin key (AuthMiddleware decided it)."""
    return bool(getattr(request.state, "is_admin", False))


def is_local_owner(request: Request) -> bool:
    """Whether the request may register local files anywhere: the admin key, or with none
    configured a loopback client that is not a browser (AuthMiddleware decided it)."""
    return bool(getattr(request.state, "is_local_owner", False))
