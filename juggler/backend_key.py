"""Backends answer only the router (issue 27): a secret per backend, given at spawn.

The router's process spawner makes a random key for each llama.cpp backend it starts and
hands it over in the child's environment (never argv, never a log line: `/proc/PID/
environ` is readable by the same user only). The backend refuses every route, `/health`
included, without the key in `X-Juggler-Backend-Key`. Every router request to a
backend goes through an httpx client with `BackendAuth`, which adds the key of the
backend the URL names.
"""

from __future__ import annotations

import functools
import hmac
import secrets
import threading
from collections.abc import Callable, Generator

import httpx

ENV = "JUGGLER_BACKEND_KEY"
#: Seconds a backend keeps an idle connection of the router's open (the router's pool,
#: `router.core.backend_http`, drops its idle ones sooner).
BACKEND_KEEP_ALIVE_S = 60
HEADER = "x-juggler-backend-key"


def new_key() -> str:
    return secrets.token_urlsafe(32)


def key_matches(given: str | None, key: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), key.encode())


def _origin(url: httpx.URL | str) -> str:
    return _origin_of(str(url))


@functools.lru_cache(maxsize=1024)
def _origin_of(url: str) -> str:
    """Asked for every forwarded request: a URL is parsed once."""
    u = httpx.URL(url)
    return f"{u.scheme}://{u.host}:{u.port}"


class BackendKeys:
    """The key of each running backend, by its base URL. Written by the spawner; read by
    any client's `BackendAuth` (any thread)."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, url: str, key: str) -> None:
        with self._lock:
            self._keys[_origin(url)] = key

    def remove(self, url: str) -> None:
        with self._lock:
            self._keys.pop(_origin(url), None)

    def for_url(self, url: httpx.URL | str) -> str | None:
        with self._lock:
            return self._keys.get(_origin(url))


def backend_headers(auth: httpx.Auth | None) -> Callable[[str], dict[str, str]]:
    """The headers a request to a backend URL carries: its key, with `auth` a
    `BackendAuth` (none without one: backends started without keys, in tests)."""
    keys = auth.keys if isinstance(auth, BackendAuth) else None

    def headers_for(url: str) -> dict[str, str]:
        key = keys.for_url(url) if keys is not None else None
        return {HEADER: key} if key is not None else {}

    return headers_for


class BackendAuth(httpx.Auth):
    """Adds the backend's key to every request sent to a backend that has one."""

    def __init__(self, keys: BackendKeys) -> None:
        self.keys = keys

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        key = self.keys.for_url(request.url)
        if key is not None:
            request.headers[HEADER] = key
        yield request
