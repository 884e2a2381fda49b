"""Request bodies in the OpenAPI document, taken from the pydantic models.

Routes read their JSON themselves (so a bad body is our 400, never FastAPI's 422), which
hides the body from FastAPI's generated document. `body_of(Model)` is the route's
`openapi_extra`: it declares the body by reference, and `document_request_bodies(app)`
adds every referenced model (and the models it nests) to `components.schemas`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

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


def document_request_bodies(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(_components())
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
