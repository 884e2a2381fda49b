"""The router's generation lane (issue 47): the generation routes' handlers called in
front of FastAPI's routing, with FastAPI's rules for their outcomes."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from juggler.errors import BadRequest, JugglerError, ModelNotFound
from juggler.router.core.generation_lane import GenerationLane, generation_routes


class Gone(Exception):
    pass


class Inner:
    """The app behind the lane (FastAPI in the router): records what reached it."""

    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append((scope["method"], scope["path"]))
        await PlainTextResponse("inner")(scope, receive, send)


async def echo(request: Request) -> Response:
    body = await request.json()
    return JSONResponse({"echo": body, "path": request.url.path})


async def as_dict(request: Request) -> Any:
    return {"answer": (1, 2)}


async def refuses(request: Request) -> Any:
    raise ModelNotFound("model 'x' not found", param="model")


async def left(request: Request) -> Any:
    raise Gone


async def breaks(request: Request) -> Any:
    raise RuntimeError("bug")


def on_error(request: Request, exc: JugglerError) -> Response:
    return JSONResponse({"shape": request.url.path, "code": exc.code}, status_code=exc.status)


def lane() -> tuple[GenerationLane, Inner]:
    inner = Inner()
    routes = generation_routes(
        ("/v1", "/api/v1"),
        {"/echo": echo, "/dict": as_dict, "/refuses": refuses, "/left": left, "/breaks": breaks},
        {"/api/chat": echo},
    )
    return GenerationLane(inner, routes=routes, on_error=on_error, gone=Gone), inner


def test_a_generation_route_runs_its_handler_and_not_the_app_behind() -> None:
    app, inner = lane()
    client = TestClient(app)
    for path in ("/v1/echo", "/api/v1/echo", "/api/chat"):
        r = client.post(path, json={"model": "m"})
        assert r.status_code == 200
        assert r.json() == {"echo": {"model": "m"}, "path": path}
    assert inner.paths == []


def test_other_methods_and_paths_go_to_the_app() -> None:
    """A GET on a generation path is FastAPI's (405 with Allow), as is any other path."""
    app, inner = lane()
    client = TestClient(app)
    assert client.get("/v1/echo").text == "inner"
    assert client.post("/v1/other", json={}).text == "inner"
    assert client.post("/echo", json={}).text == "inner"  # no prefix: not the lane's
    assert inner.paths == [("GET", "/v1/echo"), ("POST", "/v1/other"), ("POST", "/echo")]


def test_outcomes_follow_fastapi_rules() -> None:
    app, _ = lane()
    client = TestClient(app, raise_server_exceptions=True)
    # A value that is not a Response: JSON, as FastAPI encodes it.
    assert client.post("/v1/dict", json={}).json() == {"answer": [1, 2]}
    # A JugglerError: the app's own handler, which picks the route's shape.
    r = client.post("/api/v1/refuses", json={})
    assert r.status_code == 404
    assert r.json() == {"shape": "/api/v1/refuses", "code": "model_not_found"}
    # The client went away: 499, nothing else.
    assert client.post("/v1/left", json={}).status_code == 499
    # Anything else is not the lane's to answer: it propagates (to the request-id
    # middleware's JSON 500 in the router).
    with pytest.raises(RuntimeError, match="bug"):
        client.post("/v1/breaks", json={})


def test_a_bad_request_from_a_handler_is_a_400() -> None:
    async def bad(request: Request) -> Any:
        raise BadRequest("temperature must be >= 0", param="temperature")

    inner = Inner()
    app = GenerationLane(inner, routes={"/v1/x": bad}, on_error=on_error, gone=Gone)
    client = TestClient(app)
    r = client.post("/v1/x", json={})
    assert r.status_code == 400 and r.json()["code"] == "invalid_request_error"
