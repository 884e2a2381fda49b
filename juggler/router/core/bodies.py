"""Read and validate JSON bodies so that bad input is a 400 naming the field, never a 422."""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from juggler.api.openai import ADAPTER_FIELD, PROMPT_FIELD, SAMPLING_FIELD
from juggler.errors import BadRequest
from juggler.options import bad_request_from

M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("request body is empty; expected a JSON object")
    try:
        data = json.loads(raw, parse_constant=_non_finite, parse_float=_finite)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    if ADAPTER_FIELD in data:
        raise BadRequest(
            f"{ADAPTER_FIELD} is set by the server; name a LoRA adapter as the model",
            param=ADAPTER_FIELD,
        )
    for own in (PROMPT_FIELD, SAMPLING_FIELD):
        if own in data:
            raise BadRequest(f"{own} is set by the server", param=own)
    if b"\\u" in raw and _has_lone_surrogate(data):
        raise BadRequest("request body holds an unpaired UTF-16 surrogate (\\ud800-\\udfff)")
    return data


def _non_finite(word: str) -> Any:
    """JSON has no NaN or Infinity (Python's parser takes them): a 400 in every dialect."""
    raise BadRequest(f"request body holds {word}, which is not a JSON number")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for a double (`1e309`) is a 400, not inf."""
    value = float(text)
    if not math.isfinite(value):
        raise BadRequest(f"request body holds the number {text[:40]}, which is out of range")
    return value


def _has_lone_surrogate(data: Any) -> bool:
    """JSON's \\u escapes can spell half a surrogate pair, which no UTF-8 text can hold;
    such a string would fail later, deep in a backend."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise bad_request_from(exc) from None


async def parse(request: Request, model: type[M]) -> tuple[M, dict[str, Any]]:
    """The validated model and the raw dict (forwarded as is, unknown fields included)."""
    data = await read_json(request)
    return validate(model, data), data


async def parse_for_model(request: Request, model: type[M]) -> tuple[str, dict[str, Any]]:
    """Validate an inference body that must name its model; returns the model name and
    the raw dict to forward."""
    body, data = await parse(request, model)
    return model_of(body), data


def model_of(body: BaseModel) -> str:
    """The model an inference body names (a 400 when it names none)."""
    name = getattr(body, "model", None)
    if not name:
        raise BadRequest("model is required", param="model")
    return str(name)
