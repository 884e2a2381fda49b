"""The OpenAPI document as the contract (issue 27: "every status an operation returns is
documented, required fields are required, 405 carries `Allow`").

- Request bodies, taken from the pydantic models. Routes read their JSON themselves (so
  a bad body is our 400, never FastAPI's 422), which hides the body from FastAPI's
  generated document. `body_of(Model)` is the route's `openapi_extra`: it declares the
  body by reference, and `document_request_bodies(app)` adds every referenced model
  (and the models it nests) to `components.schemas`.
- What a body needs beyond its fields' types: `model` is required when the server has
  no default model to fall back on, one of two alternatives (`model` or `name`), at
  least one key (`_EXTRA`).
- Error statuses: every operation documents those the shared middleware can answer with
  (400 bad input, 401 key, 403 admin or browser rules, 503 draining or too many
  connections; 413 and 415 where there is a body), and an operation that names a model
  or a resource also those of the model's life (404, 409, 422, 429, 500, 502, 504, 507).
- `allowed_methods`: the methods of every route of a path, for a 405's `Allow`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from starlette.types import Scope

_REF = "#/components/schemas/{model}"
_MODELS: dict[str, type[BaseModel]] = {}


def body_of(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is `model`."""
    _MODELS[model.__name__] = model
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}
    }


def _components() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, model in _MODELS.items():
        schema = model.model_json_schema(ref_template=_REF)
        out.update(schema.pop("$defs", {}))
        out[name] = schema
    return out


#: Fields that fall back on the server's default model (`model` setting) when omitted.
_DEFAULT_MODEL_FIELDS = {
    "ChatRequest": "model",
    "CompletionRequest": "model",
    "EmbeddingRequest": "model",
    "RerankRequest": "model",
    "ResponsesRequest": "model",
    "TokenizeRequest": "model",
    "DetokenizeRequest": "model",
    "LoadLoraAdapter": "base_model",
    "RegisterAdapter": "base_model",
}
_TEXT = {"type": "string", "minLength": 1}


def _one_of_fields(*names: str) -> dict[str, Any]:
    return {"anyOf": [{"required": [n], "properties": {n: _TEXT}} for n in names]}


#: What a body needs beyond its fields' types (the handlers' own checks, stated).
_EXTRA: dict[str, dict[str, Any]] = {
    "NameBody": _one_of_fields("model", "name"),
    "PullBody": _one_of_fields("model", "name"),
    "CreateBody": {
        "anyOf": [
            {"required": ["from"], "properties": {"from": _TEXT}},
            {"required": ["files"], "properties": {"files": {"type": "object"}}},
        ]
    },
    "SetRequest": {"minProperties": 1},
}
#: Path parameters' forms the handlers check.
_PARAMS = {"digest": {"type": "string", "pattern": "^sha256:[0-9a-fA-F]{64}$"}}
#: Lemonade's `checkpoints`: only the main checkpoint.
_CHECKPOINTS = {
    "type": "object",
    "properties": {"main": {"type": "string"}},
    "additionalProperties": False,
}


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """`prop` without its `null` alternative, and not empty."""
    base = {k: v for k, v in prop.items() if k != "default"}
    options = [o for o in base.get("anyOf", [base]) if o.get("type") != "null"]
    out = {k: v for k, v in base.items() if k != "anyOf"}
    out.update(options[0] if len(options) == 1 else {"anyOf": options})
    if out.get("type") == "string":
        out["minLength"] = max(1, int(out.get("minLength", 0)))
    return out


def _bodies(schemas: dict[str, Any], default_model: str) -> None:
    for name, extra in _EXTRA.items():
        if name in schemas:
            schemas[name].update(extra)
    set_props = schemas.get("SetRequest", {}).get("properties", {})
    for key, prop in set_props.items():  # null is not a setting's value
        set_props[key] = _not_null(prop)
    for schema in schemas.values():
        props = schema.get("properties", {})
        if "checkpoints" in props:
            props["checkpoints"] = {**_CHECKPOINTS, "description": "Lemonade's form"}
    if default_model:
        return
    for name, field in _DEFAULT_MODEL_FIELDS.items():  # nothing to fall back on
        schema = schemas.get(name)
        if schema and field in schema.get("properties", {}):
            schema["properties"][field] = _not_null(schema["properties"][field])
            required = schema.setdefault("required", [])
            if field not in required:
                required.append(field)


_ERROR = {
    "description": "",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "description": "An error: {error: {message, type, param, code}} (Ollama's "
                "routes: {error: message}; Anthropic's: {type: error, error: {...}})",
            }
        }
    },
}
_ALWAYS = {
    "400": "Bad request: a body, parameter or header the route cannot use",
    "401": "A missing or wrong API key",
    "403": "Not allowed: the admin key, or a browser's request from another origin",
    "503": "Draining for a shutdown, or too many open connections",
}
_WITH_BODY = {
    "413": "The body is larger than max_body_bytes",
    "415": "The body is not JSON",
}
_RESOURCE = {
    "404": "No such model, session, response or file",
    "409": "Conflicts with the state of the model or resource",
    "422": "A well-formed request that cannot be carried out (Lemonade's unknown model)",
    "429": "Too many requests waiting, or a queue timeout",
    "500": "The model failed to load or its backend failed",
    "502": "The model's backend went away",
    "504": "The model's backend did not answer in time",
    "507": "Not enough disk space for a download",
}


def _errors(op: dict[str, Any], path: str) -> None:
    codes = dict(_ALWAYS)
    if "requestBody" in op:
        codes.update(_WITH_BODY)
    if "requestBody" in op or "{" in path or op.get("parameters"):
        codes.update(_RESOURCE)
    responses = op.setdefault("responses", {})
    for code, text in codes.items():
        responses.setdefault(code, {**_ERROR, "description": text})
    if "422" in responses and "Validation" in str(responses["422"].get("description", "")):
        responses["422"] = {**_ERROR, "description": _RESOURCE["422"]}  # not FastAPI's


def contract(doc: dict[str, Any], *, default_model: str) -> dict[str, Any]:
    """`doc` with the body rules and error statuses of the module doc."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_components())
    _bodies(schemas, default_model)
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method in _METHODS:
                _errors(op, path)
                if method == "head":  # no body, so no content type
                    for response in op["responses"].values():
                        response.pop("content", None)
                for param in op.get("parameters", []):
                    if param.get("name") in _PARAMS:
                        param["schema"] = _PARAMS[param["name"]]
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return doc


def document_request_bodies(app: FastAPI, *, default_model: str = "") -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = contract(doc, default_model=default_model)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


@functools.cache
def _template(path: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", path)
    regex = "".join(
        (".+" if p.endswith(":path}") else "[^/]+") if p.startswith("{") else re.escape(p)
        for p in parts
    )
    return re.compile(f"^{regex}$")


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """The documented methods of `scope`'s path: its own entry when it has one, else
    those of every path template that matches it."""
    path = scope.get("path", "")
    paths = app.openapi().get("paths", {})
    if path in paths:  # a literal path wins over templates (/adapters/info)
        matching = [paths[path]]
    else:
        matching = [item for t, item in paths.items() if _template(t).match(path)]
    return sorted({m.upper() for item in matching for m in item if m in _METHODS})
