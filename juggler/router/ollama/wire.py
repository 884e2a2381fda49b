"""Ollama's API as data: its request bodies, NDJSON lines, error shape and the small
pieces of its answers (times, names). Pure; what a request means to a backend is
`request` (with `options` and `keep_alive`: `options`), the routes are `routes`,
`models` and `create`.

Fields Juggler cannot honour (suffix, context, logprobs) are
refused with 400 when set, saying why, never ignored (`refuse_set`, called by `request`).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from juggler.api.limits import MAX_INPUTS, MAX_MESSAGES, capped
from juggler.api.structured import Tool
from juggler.errors import BadRequest, JugglerError, NotImplementedParam
from juggler.router.ollama.messages import Format, Message

#: The Ollama API version Juggler speaks (clients check /api/version).
API_VERSION = "0.12.0"
#: Streamed answers are JSON lines.
NDJSON = "application/x-ndjson"


def is_ollama_path(path: str) -> bool:
    """Ollama's routes: /api/*, but Lemonade's /api/v1/*."""
    return path.startswith("/api/") and not path.startswith("/api/v1/")


def error_body(exc: JugglerError, request_id: str = "") -> dict[str, Any]:
    """Ollama's error shape, `{"error": "message"}` (with Juggler's code and the id)."""
    return {"error": exc.message, "code": exc.code, "request_id": request_id or None}


def line(obj: dict[str, Any]) -> bytes:
    """One NDJSON line."""
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _not_a_bool(what: str) -> Any:
    """A before-validator refusing `true` / `false` where Ollama wants a number or a
    duration (issue 52: `keep_alive: true` was read as 1 s, `dimensions: true` as 1)."""

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"{what}, not a boolean")
        return value

    return BeforeValidator(check)


#: Seconds, or a Go duration ("5m"); Ollama refuses a boolean.
KeepAlive = Annotated[float | StrictStr | None, _not_a_bool("a number of seconds or a duration")]


class _Generating(_Body):
    model: StrictStr = Field(min_length=1)
    stream: StrictBool = True
    options: dict[StrictStr, Any] | None = None
    keep_alive: KeepAlive = None
    format: Format = None
    think: StrictBool | StrictStr | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = None


class ChatBody(_Generating):
    messages: Annotated[list[Message] | None, capped(MAX_MESSAGES, "messages")] = None
    tools: list[Tool] | None = Field(None, max_length=128)


class GenerateBody(_Generating):
    prompt: StrictStr | None = None
    suffix: StrictStr | None = None
    system: StrictStr | None = None
    template: StrictStr | None = None
    context: list[int] | None = None
    raw: StrictBool | None = None
    images: list[Any] | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None


class EmbedBody(_Body):
    model: StrictStr = Field(min_length=1)
    input: Annotated[StrictStr | list[StrictStr], capped(MAX_INPUTS, "inputs")]
    truncate: StrictBool | None = None
    options: dict[StrictStr, Any] | None = None
    keep_alive: KeepAlive = None
    dimensions: StrictInt | None = Field(None, ge=1)


class EmbeddingsBody(_Body):
    model: StrictStr = Field(min_length=1)
    prompt: StrictStr | None = None
    options: dict[StrictStr, Any] | None = None
    keep_alive: KeepAlive = None


class NameBody(_Body):
    """show / delete: Ollama accepts the model as `model` or (older) `name`."""

    model: StrictStr | None = None
    name: StrictStr | None = None
    verbose: StrictBool | None = None

    def model_name(self) -> str:
        found = self.model or self.name
        if not found:
            raise BadRequest("model is required", param="model")
        return found


class PullBody(NameBody):
    insecure: StrictBool | None = None
    stream: StrictBool = True


class CopyBody(_Body):
    source: StrictStr = Field(min_length=1)
    destination: StrictStr = Field(min_length=1)


class CreateBody(_Body):
    """Ollama's create: the fields its CLI sends for a Modelfile, or (older clients) the
    Modelfile itself in `modelfile`, and the model's name in `name`."""

    model: StrictStr | None = Field(None, min_length=1)
    name: StrictStr | None = Field(None, min_length=1)
    modelfile: StrictStr | None = Field(None, max_length=1 << 20)
    from_: StrictStr | None = Field(None, alias="from")
    files: dict[StrictStr, StrictStr] | None = None
    parameters: dict[StrictStr, Any] | None = None
    stream: StrictBool = True
    quantize: StrictStr | None = None
    adapters: dict[StrictStr, StrictStr] | None = None
    template: StrictStr | None = None
    license: StrictStr | list[StrictStr] | None = None
    system: StrictStr | None = None
    messages: list[Any] | None = Field(None, max_length=MAX_MESSAGES)
    requires: StrictStr | None = None

    def model_name(self) -> str:
        found = self.model or self.name
        if not found:
            raise BadRequest("model is required", param="model")
        return found


def refuse_set(fields: dict[str, Any], why: str) -> None:
    """400 naming the first field that is set (not None, not empty, not False)."""
    for name, value in fields.items():
        if value not in (None, "", [], {}, False, 0):
            raise NotImplementedParam(name, why)


# -- requests ----------------------------------------------------------------------------------
#: Why Juggler refuses what it cannot honour.


# -- responses ---------------------------------------------------------------------------------
def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def iso_at(epoch_s: float) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).isoformat().replace("+00:00", "Z")


def done_reason(finish: str | None) -> str:
    return "length" if finish == "length" else "stop"


def ollama_name(name: str) -> str:
    """How Ollama writes a model name: with a tag (":latest" by default)."""
    tail = name.rsplit("/", 1)[-1]
    return name if ":" in tail else f"{name}:latest"
