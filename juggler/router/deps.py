"""The router's shared objects, hung on `app.state.juggler` at startup."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from juggler.config import Settings
from juggler.logbook import LogBook
from juggler.manager.manager import Manager
from juggler.registry.catalog import Registry
from juggler.router.adapters import Adapters
from juggler.router.figures import FiguresPoller
from juggler.router.pins import PinBook
from juggler.router.proxy import Proxy
from juggler.router.response_table import ResponseTable
from juggler.router.session_table import SessionTable


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
