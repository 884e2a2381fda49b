"""Forward a request to a model's backend and stream the answer back, chunk by chunk.

Runs on the router's event loop. For every forwarded request the proxy holds a manager
`Lease` (the request counts as in flight, so its backend cannot be evicted) and releases it
when the response has been fully sent, the client went away, or the backend failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
from fastapi import Request, Response

from juggler.api.streams import ClosingStreamingResponse
from juggler.backend_key import backend_headers
from juggler.errors import BackendDead, Overloaded, TooManyRequests
from juggler.manager.lease import Lease
from juggler.manager.manager import Manager
from juggler.router.core.admission import prompt_refusal
from juggler.router.core.backend_http import BackendPool, BackendResponse
from juggler.router.core.drain import Drain
from juggler.router.core.handoff import HandedOff, Sender, accepted, ask, transport_of
from juggler.router.core.relay import Relay

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often a non-streaming request checks whether its client is still there.
DISCONNECT_POLL_S = 0.25
#: Generation can take minutes; only connecting has a short deadline.
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None)
_PASS_HEADERS = ("content-type", "cache-control", "retry-after")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


SHUTTING_DOWN = "the server is shutting down"


class Proxy:
    """Owns the HTTP client to backends and remembers which backend served last (stats)."""

    def __init__(
        self,
        manager: Manager,
        drain: Drain | None = None,
        *,
        max_waiting: int = 256,
        queue_timeout_s: float = 300.0,
        ping_interval_s: float = 0.0,
    ) -> None:
        self.manager = manager
        self.max_waiting = max_waiting
        self.queue_timeout_s = queue_timeout_s
        #: SSE heartbeats of relayed streams (`heartbeat`; 0: none).
        self.ping_interval_s = ping_interval_s
        self.drain = drain or Drain(0.0)
        self.drain.on_expire(self._cut_all)
        #: The streams running now: relayed, or written by their backend (`handoff`).
        self._relays: set[Relay | HandedOff] = set()
        #: Sends client connections to backends' inboxes (`handoff`).
        self.sender = Sender()
        #: For the router's own calls to backends (figures, adapters, sessions).
        self.client = httpx.AsyncClient(
            timeout=TIMEOUT,
            limits=httpx.Limits(max_connections=None),
            auth=manager.backend_auth,  # each backend answers only with its key
        )
        #: For forwarded requests, the per-token path (see `backend_http`).
        self.pool = BackendPool(backend_headers(manager.backend_auth))
        #: (model_name, backend_url) of the most recent inference request.
        self.last_served: tuple[str, str] | None = None
        #: Requests waiting in `manager.acquire` (for a load, or for an eviction to end).
        self.num_waiting = 0
        #: Called when a request goes to a backend and when it is over (the figures
        #: poller keeps reading backends' counters while they work).
        self.on_activity: Callable[[], None] = lambda: None

    async def aclose(self) -> None:
        self.pool.close()
        self.sender.close()
        await self.client.aclose()

    async def acquire(self, model: str, load_options: Mapping[str, Any] | None = None) -> Lease:
        """A lease on a ready backend of `model` (auto-loading it, with `load_options` over
        its saved options when it is not loaded), waiting at most `queue_timeout_s`. With `max_waiting` requests already waiting for models, a new
        one is refused at once with 429: no request waits without bound."""
        if self.num_waiting >= self.max_waiting:
            raise TooManyRequests(
                f"{self.num_waiting} requests are already waiting for models to load; retry later",
                retry_after_s=5,
            )
        self.num_waiting += 1
        try:
            return await asyncio.wait_for(
                self.manager.acquire(model, load_options), self.queue_timeout_s
            )
        except TimeoutError:
            raise TooManyRequests(
                f"model {model!r} was not ready within {self.queue_timeout_s:.0f} s; retry later",
                retry_after_s=10,
            ) from None
        finally:
            self.num_waiting -= 1

    async def _send(
        self,
        lease: Lease,
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> BackendResponse:
        self.on_activity()
        response = await self.pool.request(
            method, lease.backend_url + path, body=body, headers=headers
        )
        self.last_served = (lease.model_name, lease.backend_url)
        lease.on_release(self.on_activity)
        return response

    async def _open(
        self,
        model: str,
        method: str,
        path: str,
        body: Any,
        load_options: Mapping[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[Lease, BackendResponse]:
        """Acquire the model and open the backend response (headers read, body not).

        A backend that fails before answering (refused connection, or a pooled keep-alive
        connection to a process that died) is reported to the manager, which drops it if
        its process is gone, and the request is tried once more on a fresh backend: no
        response was produced, and generating has no side effects."""
        for attempt in (1, 2):
            lease = await self.acquire(model, load_options)
            refusal = prompt_refusal(path, body, self._ctx_size(lease.server_id))
            if refusal is not None:  # before the backend renders or tokenizes anything
                lease.release()
                raise refusal
            try:
                return lease, await self._send(lease, method, path, body, headers)
            except asyncio.CancelledError:
                lease.release()  # the client went away while the backend was working
                raise
            except httpx.TransportError as exc:
                lease.release()
                await self.manager.report_backend_failure(lease)
                if attempt == 1:
                    log.warning("backend for %s unreachable (%s); retrying once", model, exc)
                    continue
                raise BackendDead(f"backend for {model!r} failed: {exc!r}") from exc
        raise AssertionError("unreachable")

    def _ctx_size(self, server_id: int) -> int:
        """The context size the backend was loaded with (0: unknown)."""
        for snap in self.manager.snapshot():
            if snap.server_id == server_id:
                return snap.options.ctx_size
        return 0

    async def forward(
        self,
        model: str,
        path: str,
        body: Any,
        *,
        method: str = "POST",
        lease: Lease | None = None,
        client_request: Request | None = None,
        extra_headers: dict[str, str] | None = None,
        on_release: Callable[[], None] | None = None,
        load_options: Mapping[str, Any] | None = None,
        hand_off: bool = False,
    ) -> Response:
        """Send `body` to the backend of `model` at `path`; stream if the backend streams.

        With `lease` given (session routes), that backend is used and the lease is released
        here; otherwise the model is acquired (auto-loaded) first; `extra_headers` go to
        the backend with the body (lease path only). With `client_request`
        given, a client that disconnects before a non-streaming answer is ready gets the
        backend request closed, which cancels the generation there. `on_release` runs
        when the request is over, however it ends (not if no backend was reached).
        `load_options`: the options an auto-load of `model` takes (lease path excluded).
        `hand_off`: the backend may write the stream into the client's connection itself
        (`handoff`; an OpenAI stream, whose bytes go to the client as they are)."""
        held: Lease
        token, asking = None, None
        if (
            hand_off
            and lease is None
            and client_request is not None
            and transport_of(client_request.scope) is not None
            and not self.drain.is_expired
        ):
            token, asking = ask(self.ping_interval_s)
        if lease is None:
            held, response = await self._unless_gone(
                self._open(model, method, path, body, load_options, asking), client_request
            )
            if on_release is not None:
                held.on_release(on_release)
        else:
            held = lease
            if on_release is not None:
                held.on_release(on_release)
            try:
                response = await self._unless_gone(
                    self._send(held, method, path, body, extra_headers), client_request
                )
            except httpx.TransportError as exc:
                held.release()
                await self.manager.report_backend_failure(held)
                raise BackendDead(f"backend for {model!r} failed: {exc!r}") from exc
            except BaseException:
                held.release()  # the client went away (or the server is shutting down)
                raise
        inbox = accepted(response) if token is not None else None
        if token is not None and inbox is not None and response.status_code == 200:
            return self._handed_off(held, response, token, inbox)
        headers = {k: v for k, v in response.headers.items() if k in _PASS_HEADERS}
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                content = await self._unless_gone(response.aread(), client_request)
            except httpx.TransportError as exc:
                await self.manager.report_backend_failure(held)
                raise BackendDead(f"backend for {model!r} died mid-request: {exc!r}") from exc
            finally:
                await response.aclose()
                held.release()
            if response.status_code == 503:
                # The engine says it is dead (or cannot serve): let the manager probe it;
                # a backend whose /health fails is stopped, and the watchdog restarts it.
                await self.manager.report_backend_failure(held)
            return Response(content, status_code=response.status_code, headers=headers)
        return ClosingStreamingResponse(
            self._relay(held, response),
            status_code=response.status_code,
            headers=headers,
        )

    async def _unless_gone(self, work: Awaitable[T], client_request: Request | None) -> T:
        """Await `work`; if the client disconnects first, cancel it (closing the backend
        request, which cancels the generation there) and raise ClientGone."""
        if client_request is None:
            return await work
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if done:
                    return task.result()
                if await client_request.is_disconnected():
                    raise ClientGone
                if self.drain.is_expired:
                    raise Overloaded(SHUTTING_DOWN)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _relay(self, lease: Lease, response: BackendResponse) -> AsyncIterator[bytes]:
        """Yield backend bytes as they come (see relay.Relay); the lease is released when
        the stream ends, however it ends."""
        relay = Relay(
            response,
            lease.model_name,
            lambda: self.manager.report_backend_failure(lease),
            self.ping_interval_s,
        )
        self._relays.add(relay)
        try:
            if self.drain.is_expired:
                relay.cut(Overloaded(SHUTTING_DOWN))
            # Closed here, not left to the garbage collector: leaving an `async for`
            # does not close the generator it iterates, and until the relay's own
            # `finally` runs the backend response stays open and its generation runs on
            # for a client that left.
            async with contextlib.aclosing(relay.stream()) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            self._relays.discard(relay)
            lease.release()

    def _handed_off(
        self, lease: Lease, response: BackendResponse, token: str, inbox: str
    ) -> HandedOff:
        """The answer to a stream its backend writes (see `handoff`); it counts as
        streaming, and the drain cuts it, until it ends."""
        handed = HandedOff(
            lease,
            response,
            token,
            inbox,
            self.sender,
            lambda: self.manager.report_backend_failure(lease),
        )
        self._relays.add(handed)
        lease.on_release(lambda: self._relays.discard(handed))
        return handed

    def streaming_models(self) -> set[str]:
        """Models with a stream being relayed now (health's `is_streaming`)."""
        return {relay.model for relay in self._relays}

    def _cut_all(self) -> None:
        for relay in list(self._relays):
            relay.cut(Overloaded(SHUTTING_DOWN))

    async def get_json(self, url: str) -> Any:
        response = await self.client.get(url, timeout=10.0)
        response.raise_for_status()
        return response.json()
