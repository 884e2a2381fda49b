"""The security boundary: who may change config, run commands or register files.

Juggler's model (README "Security"):
- The server binds 127.0.0.1 unless the admin sets `host`.
- `api_key`, when set, is required on every route but `/live`; the admin key is accepted
  wherever the API key is. A key comes as `Authorization: Bearer KEY` or `x-api-key: KEY`.
- `/internal/*` (pin, runtime settings, config) needs the admin key when one is set;
  without one it answers loopback clients only, so a server opened to the network with
  `host=0.0.0.0` and no admin key never lets a remote client change its settings.
- `GET /api/v1/logs` is guarded the same way (`admin_only`): backend output may hold
  other users' prompts. Without an admin key it also needs the API key, as every route.
- Registering a model over HTTP that names a command, or a local file outside the model
  directories (Juggler's model cache and the admin's `model_dirs`), needs the admin key,
  and a command needs `allow_command_recipes` in the config file as well (no HTTP request
  can turn that on). Hugging Face references are always fine: they only download into
  the cache.
- Keys are compared in constant time (`hmac.compare_digest`).

Everything here is a pure function of the request's headers and the settings.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from juggler.config import Settings
from juggler.errors import BadRequest, Forbidden, JugglerError, Unauthorized
from juggler.registry.checkpoint import HfRef, LocalRef, PackageRef, cache_dir, parse_checkpoint


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key a client presents: `Authorization: Bearer`, else `x-api-key` (Anthropic's
    clients send theirs there). Either may carry the API key or the admin key."""
    token = bearer(headers)
    if token is not None:
        return token
    for name, value in headers:
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
    return None


def key_matches(token: str | None, key: str | None) -> bool:
    """Constant-time comparison; False when either side is missing."""
    if token is None or not key:
        return False
    return hmac.compare_digest(token.encode(), key.encode())


#: Headers only a browser sends: Origin, and Fetch Metadata.
BROWSER_HEADERS = frozenset({b"origin", b"sec-fetch-site", b"sec-fetch-mode"})


def is_browser(header_names: Iterable[bytes]) -> bool:
    """Whether a request bears a browser's marks (lower-case header names)."""
    return any(name in BROWSER_HEADERS for name in header_names)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


#: The logs route, under each API prefix.
LOG_PATHS = frozenset({"/api/v1/logs", "/v1/logs"})


def admin_only(path: str) -> str | None:
    """What an admin-only path is, in words for its errors; None for any other path."""
    if path.startswith("/internal/"):
        return "/internal/*"
    if path.rstrip("/") in LOG_PATHS:
        return "the logs (backend output may hold other users' prompts)"
    return None


def admin_refusal(
    what: str, *, is_admin: bool, has_admin_key: bool, client_host: str | None
) -> JugglerError | None:
    """Why an admin-only path refuses this client (None: it may go on): the admin key is
    required when one is set; without one, only loopback clients are answered."""
    if has_admin_key and not is_admin:
        return Unauthorized(f"{what}: a valid admin API key is required")
    if not has_admin_key and not is_loopback(client_host):
        return Forbidden(f"{what}: loopback clients only, unless admin_api_key is set")
    return None


def model_dirs(settings: Settings) -> list[Path]:
    """Where clients may point checkpoints without the admin key."""
    return [cache_dir().resolve(), *(Path(d).expanduser().resolve() for d in settings.model_dirs)]


def inside_model_dirs(path: Path, settings: Settings) -> bool:
    real = path.expanduser().resolve()
    return any(real.is_relative_to(d) for d in model_dirs(settings))


def check_registration(
    settings: Settings,
    *,
    is_admin: bool,
    recipe: str,
    checkpoint: str,
    command: str | None,
    is_local_owner: bool = False,
) -> None:
    """Raise Forbidden unless a client may register this model over HTTP.
    `is_local_owner`: the request came from a loopback client that is not a browser and
    no admin key is configured; it may register a local file anywhere (as Lemonade
    allows), never a command."""
    if recipe == "command" or command:
        if not settings.allow_command_recipes:
            raise Forbidden(
                "command recipes are disabled; the admin can enable them with "
                "allow_command_recipes in the config file",
                param="recipe",
            )
        if not is_admin:
            raise Forbidden("registering a command needs the admin API key", param="command")
    if not checkpoint:
        return
    try:
        ref = parse_checkpoint(checkpoint)
    except ValueError as exc:
        raise BadRequest(str(exc), param="checkpoint") from None
    if isinstance(ref, HfRef) or is_admin or is_local_owner:
        return
    if isinstance(ref, LocalRef) and inside_model_dirs(ref.path, settings):
        return
    where = (
        "an installed package"
        if isinstance(ref, PackageRef)
        else "a file outside the model directories"
    )
    raise Forbidden(
        f"registering {where} needs the admin API key, or with none configured a "
        f"request from this machine that is not a browser's (model directories: "
        f"{', '.join(str(d) for d in model_dirs(settings))})",
        param="checkpoint",
    )
