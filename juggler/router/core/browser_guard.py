"""The browser door (issue 22): which Host, Origin and content type a request may carry.

A web page the user opens can send requests to a server on the user's machine: a "simple"
cross-site request (a `text/plain` POST, a form) needs no CORS preflight, and after DNS
rebinding (a hostname the attacker controls made to resolve to 127.0.0.1) the page is
even same-origin with the server. Three checks close that door, for every route and
method, before any route runs:

- **Host**: the request's Host header must name this server: a loopback name or address
  (`localhost`, `127.0.0.1`, `[::1]`, with any port), the address it is bound to, any IP
  address when it is bound to every interface (a rebinding page always sends its own
  hostname, never an address), or a name in `allowed_hosts` (`*.example.com` for a
  domain and its subdomains, `*` for any). Anything else: 403.
- **Origin**: a request that carries an `Origin` header (browsers send it on every
  cross-origin request, and on every POST) must come from the server's own origin (the
  dashboard: the Origin's host and port are the request's Host) or from one listed in
  `cors_origins`. Anything else: 403, preflights included (an allowed origin's preflight
  is answered by the CORS middleware inside this one).
- **Content type**: a request body is JSON (`application/json`, or `+json`), or an upload
  where uploads are meant (Ollama's blobs: any type). A body with no content type or
  curl's default `application/x-www-form-urlencoded` (`curl -d`, as Ollama's docs show)
  is read as JSON only from a client that is not a browser (no `Origin`, no `Sec-Fetch-*`
  header). Anything else: 415. That alone stops the no-preflight path even where the two
  checks above were opened too wide.

Everything but the middleware itself is a pure function of the headers and settings.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from juggler.errors import Forbidden, JugglerError, UnsupportedMediaType
from juggler.router.core.middleware import request_id_of, send_error
from juggler.router.core.security import is_browser

#: Paths whose bodies are file uploads (any content type).
UPLOAD_PREFIXES = ("/api/blobs/",)
#: Paths where OpenAI's API defines multipart form uploads (Juggler answers them with
#: its own refusal: audio is not built).
MULTIPART_SUFFIXES = ("/audio/transcriptions", "/audio/translations")
_JSON_TYPES = frozenset({"application/json"})
#: What a non-browser client may send a JSON body as (curl -d; no header at all).
_LENIENT_TYPES = frozenset({"", "application/x-www-form-urlencoded"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})


def split_host(value: str) -> tuple[str, int | None]:
    """`host[:port]` (IPv6 in brackets) -> (lower-case host without brackets, port)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        host, rest = value[1:end], value[end + 1 :]
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    return host, int(port) if port.isdigit() else None


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _name_matches(host: str, pattern: str) -> bool:
    pattern = pattern.strip().lower()
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host == pattern[2:] or host.endswith(pattern[1:])
    return host == split_host(pattern)[0]


def host_allowed(host_header: str | None, bind_host: str, allowed: Iterable[str]) -> bool:
    """Whether a Host header names this server (see the module's docstring)."""
    if host_header is None:
        return True  # HTTP/1.0 without Host: not a browser
    host, _ = split_host(host_header)
    if not host:
        return False
    ip = _ip(host)
    if host in _LOOPBACK_NAMES or (ip is not None and ip.is_loopback):
        return True
    bind = split_host(bind_host)[0] if bind_host not in _WILDCARD_BINDS else ""
    if bind_host in _WILDCARD_BINDS and ip is not None:
        return True
    if bind and host == bind:
        return True
    return any(_name_matches(host, p) for p in allowed)


def origin_allowed(origin: str, host_header: str | None, cors_origins: Iterable[str]) -> bool:
    """Whether a request's Origin may talk to the server: its own (same host and port as
    the request's Host) or an admin-listed one."""
    listed = {o.strip().rstrip("/").lower() for o in cors_origins}
    given = origin.strip().rstrip("/").lower()
    if "*" in listed or given in listed:
        return True
    if given == "null" or host_header is None:
        return False
    parts = urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    default = 443 if parts.scheme == "https" else 80
    try:
        origin_port = parts.port or default
    except ValueError:
        return False
    host, port = split_host(host_header)
    return parts.hostname == host and origin_port == (port or default)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def body_refusal(
    path: str, content_type: str | None, *, is_browser: bool
) -> UnsupportedMediaType | None:
    """Why a request body of this type is refused (None: it may be read)."""
    if path.startswith(UPLOAD_PREFIXES):
        return None
    kind = media_type(content_type)
    if kind == "multipart/form-data" and path.endswith(MULTIPART_SUFFIXES):
        return None
    if kind in _JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json")):
        return None
    if kind in _LENIENT_TYPES and not is_browser:
        return None
    shown = kind or "no Content-Type"
    hint = " from a browser" if kind in _LENIENT_TYPES else ""
    return UnsupportedMediaType(
        f"request bodies must be JSON (Content-Type: application/json); got {shown}{hint}"
    )


@dataclass(frozen=True)
class BrowserGuard:
    """The three checks with this server's settings."""

    bind_host: str
    allowed_hosts: tuple[str, ...]
    cors_origins: tuple[str, ...]

    def refusal(self, method: str, path: str, headers: dict[bytes, bytes]) -> JugglerError | None:
        host = _text(headers.get(b"host"))
        if not host_allowed(host, self.bind_host, self.allowed_hosts):
            return Forbidden(
                f"Host {host!r} does not name this server; the admin can allow it with "
                "allowed_hosts (a guard against DNS rebinding)",
                param="Host",
            )
        origin = _text(headers.get(b"origin"))
        if origin is not None and not origin_allowed(origin, host, self.cors_origins):
            return Forbidden(
                f"Origin {origin!r} may not use this server; the admin can allow it with "
                "cors_origins (a guard against cross-site requests)",
                param="Origin",
            )
        if has_body(headers) and method not in ("GET", "HEAD", "OPTIONS"):
            return body_refusal(
                path, _text(headers.get(b"content-type")), is_browser=is_browser(headers)
            )
        return None


def has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length", b"").strip()
    if length:
        return not length.isdigit() or int(length) > 0
    return b"transfer-encoding" in headers


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


class BrowserGuardMiddleware:
    """Refuses what `BrowserGuard` refuses, in the JSON error shape, before any route,
    key check or CORS handling runs."""

    def __init__(self, app: ASGIApp, *, guard: BrowserGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), value)
        refusal = self.guard.refusal(scope["method"], scope["path"], headers)
        if refusal is not None:
            await send_error(send, refusal, request_id_of(scope))
            return
        await self.app(scope, receive, send)
