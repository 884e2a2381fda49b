"""Juggler's errors, and the one function that renders them in OpenAI's shape.

    JugglerError                      status  code
    ├── BadRequest                    400     invalid_request_error (param names the field)
    │   └── ContextOverflow           400     context_length_exceeded
    ├── Unauthorized                  401     invalid_api_key
    ├── NotFound                      404     not_found
    │   ├── ModelNotFound             404     model_not_found
    │   ├── ModelNotLoaded            404     model_not_loaded   ("Model not loaded: X")
    │   └── SessionNotFound           404     session_not_found
    ├── Conflict                      409     conflict
    │   └── SlotsPinned               409     slots_pinned_error
    ├── PayloadTooLarge               413     payload_too_large
    ├── LoadFailed                    500     load_error         (evict-all-and-retry class)
    │   └── CheckpointMissing         404     file_not_found     (never triggers evict-all)
    │       └── RecipeNotInstalled    404     recipe_not_installed
    ├── BackendDead                   502     backend_error      (the process died / unreachable)
    └── Overloaded                    503     overloaded

A request's recoverable errors (4xx) leave everything running; `BackendDead` means the
backend process is gone and the manager must drop it from the table.
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


class Unauthorized(JugglerError):
    status = 401
    code = "invalid_api_key"
    type = "authentication_error"


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


class LoadFailed(JugglerError):
    status = 500
    code = "load_error"
    type = "server_error"


class CheckpointMissing(LoadFailed):
    status = 404
    code = "file_not_found"
    type = "invalid_request_error"


class RecipeNotInstalled(CheckpointMissing):
    code = "recipe_not_installed"


class BackendDead(JugglerError):
    status = 502
    code = "backend_error"
    type = "server_error"


class Overloaded(JugglerError):
    status = 503
    code = "overloaded"
    type = "server_error"


def error_body(
    message: str, *, type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    """The one renderer of OpenAI's error shape."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def render(exc: JugglerError) -> dict[str, Any]:
    return error_body(exc.message, type=exc.type, code=exc.code, param=exc.param)
