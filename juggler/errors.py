"""Juggler's errors, and the one function that renders them in OpenAI's shape.

    JugglerError                      status  code
    ├── BadRequest                    400     invalid_request_error (param names the field)
    │   ├── ContextOverflow           400     context_length_exceeded
    │   └── NotImplementedParam       400     unsupported_parameter (accepted later, never ignored)
    ├── Unauthorized                  401     invalid_api_key
    ├── Forbidden                     403     forbidden          (needs the admin key / config)
    ├── NotFound                      404     not_found
    │   ├── ModelNotFound             404     model_not_found
    │   ├── ModelNotLoaded            404     model_not_loaded   ("Model not loaded: X")
    │   ├── SessionNotFound           404     session_not_found
    │   ├── ResponseNotFound          404     response_not_found (a stored response)
    │   └── CheckpointMissing         404     file_not_found     (missing-file class)
    │       └── RecipeNotInstalled    404     recipe_not_installed
    ├── Conflict                      409     conflict
    │   └── SlotsPinned               409     slots_pinned_error
    ├── PayloadTooLarge               413     payload_too_large
    ├── TooManyRequests               429     rate_limit_exceeded (a bounded queue is full)
    ├── LoadFailed                    500     load_error         (evict-all-and-retry class)
    ├── EngineError                   500     engine_error       (one llama.cpp call failed)
    ├── EngineDead                    503     engine_dead        (the engine cannot serve any more)
    │   └── BackendDead               502     backend_error      (its process died / unreachable)
    ├── HubUnreachable                502     hub_unreachable    (the model hub did not answer)
    │   └── ChecksumMismatch          502     checksum_mismatch  (a download came corrupt)
    ├── InsufficientStorage           507     insufficient_storage (the disk is full)
    ├── NotSupported                  501     not_supported      (a route Juggler cannot serve)
    └── Overloaded                    503     overloaded

Two families matter to the manager. A request's recoverable errors (4xx, `EngineError`)
leave everything running. `EngineDead` means the engine behind a backend is gone: the
manager drops that backend from its table. Seed 000's evict-all-and-retry applies to
`LoadFailed` only, never to a missing file (`is_missing_file`); `CheckpointMissing` is a
`NotFound`, not a kind of `LoadFailed`, so the rule is an explicit check, not an accident
of inheritance.

Convert llama.cpp and subprocess failures at the boundary with `raise ... from exc`.
"""

from __future__ import annotations

from typing import Any


class JugglerError(Exception):
    status: int = 500
    code: str = "internal_error"
    type: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class BadRequest(JugglerError):
    status = 400
    code = "invalid_request_error"
    type = "invalid_request_error"


class ContextOverflow(BadRequest):
    code = "context_length_exceeded"


class NotImplementedParam(BadRequest):
    """A parameter we know but do not implement yet: refused, never silently ignored."""

    code = "unsupported_parameter"

    def __init__(self, param: str, why: str = "") -> None:
        detail = f": {why}" if why else ""
        super().__init__(f"{param} is not supported by Juggler{detail}", param=param)


class Unauthorized(JugglerError):
    status = 401
    code = "invalid_api_key"
    type = "authentication_error"


class Forbidden(JugglerError):
    status = 403
    code = "forbidden"
    type = "permission_error"


class UnsupportedMediaType(JugglerError):
    status = 415
    code = "unsupported_media_type"


class NotFound(JugglerError):
    status = 404
    code = "not_found"
    type = "invalid_request_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class ModelNotLoaded(NotFound):
    code = "model_not_loaded"


class SessionNotFound(NotFound):
    code = "session_not_found"


class ResponseNotFound(NotFound):
    code = "response_not_found"


class CheckpointMissing(NotFound):
    """A model file (or the executable of its recipe) is not on disk. Never triggers
    seed 000's evict-all retry: evicting other models cannot make a file appear."""

    code = "file_not_found"


class RecipeNotInstalled(CheckpointMissing):
    code = "recipe_not_installed"


class Conflict(JugglerError):
    status = 409
    code = "conflict"
    type = "invalid_request_error"


class SlotsPinned(Conflict):
    code = "slots_pinned_error"


class PayloadTooLarge(JugglerError):
    status = 413
    code = "payload_too_large"
    type = "invalid_request_error"


class TooManyRequests(JugglerError):
    """A bounded queue is full; the client should retry after `retry_after_s`."""

    status = 429
    code = "rate_limit_exceeded"
    type = "rate_limit_error"

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LoadFailed(JugglerError):
    """A backend could not be started (not a missing file): seed 000's evict-all class."""

    status = 500
    code = "load_error"
    type = "server_error"


class EngineError(JugglerError):
    """One llama.cpp call failed for one request; the engine itself goes on."""

    status = 500
    code = "engine_error"
    type = "server_error"


class EngineDead(JugglerError):
    """The engine cannot serve any more requests (its worker died, or it is shutting
    down); whoever owns it must replace it."""

    status = 503
    code = "engine_dead"
    type = "server_error"


class BackendDead(EngineDead):
    """The router lost a backend process (it exited or stopped answering)."""

    status = 502
    code = "backend_error"


class HubUnreachable(JugglerError):
    """The model hub (Hugging Face or its stand-in) could not be reached or failed."""

    status = 502
    code = "hub_unreachable"
    type = "server_error"


class ChecksumMismatch(HubUnreachable):
    """Downloaded bytes do not match the checksum the hub published (the file is deleted)."""

    code = "checksum_mismatch"


class InsufficientStorage(JugglerError):
    """A model file could not be written: the disk (or a quota) is full."""

    status = 507
    code = "insufficient_storage"
    type = "server_error"


class Overloaded(JugglerError):
    status = 503
    code = "overloaded"
    type = "server_error"


class NotSupported(JugglerError):
    """A known route whose function Juggler cannot provide (Ollama's push: there is no
    registry to push to); 501 as Lemonade and llama.cpp refuse such routes."""

    status = 501
    code = "not_supported"
    type = "not_supported_error"


def is_missing_file(error: BaseException) -> bool:
    """Seed 000: "Do not evict models if the WrappedServer failed to load because a file
    was not found on disk." True for exactly that class of failure."""
    return isinstance(error, CheckpointMissing)


def error_body(
    message: str, *, type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    """The one renderer of OpenAI's error shape."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def render(exc: JugglerError) -> dict[str, Any]:
    return error_body(exc.message, type=exc.type, code=exc.code, param=exc.param)
