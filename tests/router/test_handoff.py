"""The router's side of a handed-over stream (issue 47, `router.core.handoff`): which
client connections may be handed over, how a backend's head takes the handoff, and the
connections to backends' inboxes (real Unix sockets and the backend's real inbox)."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

from juggler.api.handoff import HEADER
from juggler.engine.http.handoff import Inbox
from juggler.router.core import handoff
from juggler.router.core.connections import TRANSPORT


class FakeTransport:
    """A pure stand-in for uvicorn's transport (only what `transport_of` reads)."""

    def __init__(self, *, closing: bool = False, ssl: bool = False) -> None:
        self.closing = closing
        self.ssl = ssl

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> Any:
        return object() if name == "sslcontext" and self.ssl else None


def scope(transport: Any, version: str = "1.1") -> dict[str, Any]:
    return {"type": "http", "http_version": version, "extensions": {TRANSPORT: transport}}


def test_only_an_open_plain_http11_connection_is_handed_over() -> None:
    ok = FakeTransport()
    assert handoff.transport_of(scope(ok)) is ok
    assert handoff.transport_of({"type": "http", "http_version": "1.1"}) is None
    assert handoff.transport_of(scope(ok, "1.0")) is None
    assert handoff.transport_of(scope(FakeTransport(closing=True))) is None
    assert handoff.transport_of(scope(FakeTransport(ssl=True))) is None


class Head:
    def __init__(self, value: str | None) -> None:
        self.headers = {HEADER: value} if value is not None else {}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (None, None),
        ("", None),
        ("accept @juggler-handoff-1f", "@juggler-handoff-1f"),
        ("accept @", None),
        ("accept /tmp/x/s", None),
        ("refuse @juggler-handoff-1f", None),
    ],
)
def test_a_backend_head_takes_the_handoff_only_with_accept_and_a_path(
    value: str | None, path: str | None
) -> None:
    assert handoff.accepted(Head(value)) == path  # type: ignore[arg-type]


def test_the_ask_carries_a_fresh_token_and_the_ping_interval() -> None:
    token, headers = handoff.ask(5.0)
    other, _ = handoff.ask(5.0)
    assert token != other and token.isalnum() and len(token) == 32
    assert headers == {HEADER: f"{token} 5"}


def test_the_sender_reaches_an_inbox_again_after_its_backend_restarted() -> None:
    async def main() -> None:
        inbox = Inbox()
        inbox.start()
        sender = handoff.Sender()
        try:
            first = inbox.expect("one")
            a, b = socket.socketpair()
            await sender.send(inbox.path, "fd one", a.fileno())
            os.close(await asyncio.wait_for(first.fd, 10))
            # The backend goes; another listens at the same path (a restart).
            path = inbox.path
            inbox.close()
            with pytest.raises(OSError):
                await sender.send(path, "fd one", a.fileno())
            again = Inbox(name=path.removeprefix("@"))
            assert again.path == path
            again.start()
            second = again.expect("two")
            await sender.send(path, "fd two", a.fileno())
            os.close(await asyncio.wait_for(second.fd, 10))
            again.close()
            a.close()
            b.close()
        finally:
            sender.close()

    asyncio.run(main())


def test_the_sender_keeps_a_bounded_number_of_inbox_connections() -> None:
    async def main() -> None:
        inboxes = [Inbox() for _ in range(handoff.MAX_INBOXES + 3)]
        sender = handoff.Sender()
        try:
            for inbox in inboxes:
                inbox.start()
                await sender.send(inbox.path, "cut nobody")
            assert len(sender._socks) == handoff.MAX_INBOXES
        finally:
            sender.close()
            for inbox in inboxes:
                inbox.close()

    asyncio.run(main())
