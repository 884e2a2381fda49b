"""Issue 24, item 6: Lemonade's management contract (reference/lemonade/lemonade.md) on
the real router app in-process, nothing loaded: `/internal/pin`'s validation, the
per-model options API, `models/register`, `/internal/aliases`, the naming rules and
delete's codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.router.app import create_app

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"
SMOL = "SmolLM2-135M-Instruct-GGUF"
ADMIN = {"Authorization": "Bearer admin-secret"}


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    settings = Settings(model="", ctx_size=2048, admin_api_key="admin-secret")
    app = create_app(settings, Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, headers=ADMIN, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{invalid json", "Invalid JSON body"),
        ('{"pinned": true}', "Parameter 'model' or 'model_name' is required"),
        (f'{{"model": "{SMOL}"}}', "Parameter 'pinned' is required and must be a boolean"),
        (f'{{"model": "{SMOL}", "pinned": "true"}}', "Parameter 'pinned' is required and must"),
    ],
)
def test_pin_refuses_bad_bodies_in_lemonade_words(
    client: TestClient, body: str, message: str
) -> None:
    """Issue 24: "`/pin` with an unparseable body says "Invalid JSON body""; Lemonade's
    suite: "The /pin endpoint rejects invalid requests with HTTP 400 and structured JSON
    errors"."""
    r = client.post("/internal/pin", content=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"


def test_pin_takes_model_as_model_name(client: TestClient) -> None:
    r = client.post("/internal/pin", json={"model": SMOL, "pinned": True})
    assert r.status_code == 404 and r.json()["error"]["message"] == f"Model not loaded: {SMOL}"


def options_url(model: str = SMOL) -> str:
    return f"/api/v1/models/{model}/options"


def test_options_are_saved_without_loading_and_shown_in_layers(client: TestClient) -> None:
    """lemonade.md, `GET/POST /v1/models/{id}/options`: "Save recipe options for a model
    without loading it"; "`effective` is the exact request body a `POST /v1/load` for
    this model uses right now"; "`defaults` is what a reset model would get"; "a
    `model_name` in the body is ignored"; "Saving never loads or reloads the model"."""
    before = client.get(options_url()).json()
    assert before["saved"] == {} and before["model_name"] == SMOL
    assert before["recipe"] == "llamacpp" and before["effective"] == before["defaults"]
    assert before["defaults"]["ctx_size"] == 2048 == before["resolved_ctx_size"]
    assert "pinned" not in before["effective"] and "pinned" not in before["defaults"]
    r = client.post(options_url(), json={"ctx_size": 8192, "model_name": SMOL})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["saved"] == {"ctx_size": 8192}
    assert data["effective"]["ctx_size"] == 8192 == data["resolved_ctx_size"]
    assert data["effective"]["model_name"] == SMOL and data["defaults"]["ctx_size"] == 2048
    assert client.get(f"/api/v1/models/{SMOL}").json()["recipe_options"] == {"ctx_size": 8192}
    assert client.get("/api/v1/health").json()["all_models_loaded"] == []


def test_options_merge_clear_on_null_and_reset_on_delete(client: TestClient) -> None:
    """lemonade.md: "The request merges into the model's saved entry, so keys you don't
    mention are left alone. `null` removes an option ... `DELETE` removes every saved
    option at once" ("with `saved` now `{}`")."""
    client.post(options_url(), json={"ctx_size": 4096})
    both = client.post(options_url(), json={"llamacpp_args": "--workers 2"}).json()
    assert both["saved"] == {"ctx_size": 4096, "llamacpp_args": "--workers 2"}
    assert client.post(options_url(), json={"llamacpp_args": ""}).json()["saved"] == {
        "ctx_size": 4096
    }
    cleared = client.post(options_url(), json={"ctx_size": None}).json()
    assert cleared["saved"] == {} and cleared["effective"]["ctx_size"] == 2048
    client.post(options_url(), json={"ctx_size": 4096, "auto_evict": True})
    reset = client.delete(options_url())
    assert reset.status_code == 200 and reset.json()["saved"] == {}
    assert reset.json()["effective"] == reset.json()["defaults"]


def test_dry_run_resolves_without_saving_and_still_validates(client: TestClient) -> None:
    """lemonade.md: "`dry_run: true` validates and resolves the request identically but
    persists nothing: `effective` and `resolved_ctx_size` describe the state the save
    would produce, while `saved` keeps reporting the entry on disk"."""
    preview = client.post(options_url(), json={"ctx_size": 4096, "dry_run": True}).json()
    assert preview["effective"]["ctx_size"] == 4096 == preview["resolved_ctx_size"]
    assert preview["saved"] == {} and client.get(options_url()).json()["saved"] == {}
    assert client.post(options_url(), json={"ctx_size": 0, "dry_run": True}).status_code == 400


@pytest.mark.parametrize(
    "body",
    [
        '{"nonsense": 1}',
        '{"steps": 30}',
        '{"ctx_size": "big"}',
        '{"ctx_size": "8192"}',
        '{"ctx_size": ""}',
        '{"ctx_size": "auto"}',
        '{"ctx_size": -5}',
        '{"ctx_size": 0}',
        '{"ctx_size": 4096.5}',
        '{"auto_evict": "sometimes"}',
        '{"pinned": true}',
        '{"llamacpp_args": "--no-such-flag"}',
        '{"ctx_size": 1e400}',
        '{"ctx_size": 18446744073709551615}',
        '{"ctx_size": 4096, "dry_run": "yes"}',
    ],
)
def test_bad_options_are_400s_and_nothing_is_saved(client: TestClient, body: str) -> None:
    """lemonade.md: "A `400` reports an unrecognized option name, an option from a
    different recipe, a value of the wrong type, or an invalid `ctx_size`, and nothing
    from that request is saved"; "`pinned` is not settable here"."""
    client.post(options_url(), json={"ctx_size": 1024})
    r = client.post(options_url(), content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "error" in r.json()
    assert client.get(options_url()).json()["saved"] == {"ctx_size": 1024}


def test_options_of_an_unknown_model_are_404(client: TestClient) -> None:
    assert client.get(options_url("ThisModelDoesNotExist")).status_code == 404
    assert client.post(options_url("Nope"), json={"ctx_size": 1024}).status_code == 404


def test_register_defines_a_user_model_without_downloading_it(client: TestClient) -> None:
    """lemonade.md, `POST /v1/models/register`: "Register or update a `user.*` model
    definition without downloading model files"; it answers `status`, `model_name`,
    `canonical_model_name` and `model` (`id`, `recipe`, `downloaded: false`)."""
    body = {
        "model_name": "user.Registered",
        "recipe": "llamacpp",
        "checkpoint": "example/register-endpoint-test:Q4_K_M",
        "labels": ["test-register-endpoint"],
    }
    r = client.post("/api/v1/models/register", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["status"] == "success" and data["canonical_model_name"] == "user.Registered"
    assert data["model"]["recipe"] == "llamacpp" and data["model"]["downloaded"] is False
    listed = client.get("/api/v1/models?show_all=true").json()["data"]
    entry = next(m for m in listed if m["id"] == data["model_name"])
    assert entry["checkpoint"] == body["checkpoint"] and entry["downloaded"] is False
    assert entry["labels"] == ["test-register-endpoint"]
    assert not list((client.app.state.juggler.registry.home / "models").rglob("*"))  # type: ignore[attr-defined]
    # Registering again updates the definition.
    again = client.post("/api/v1/models/register", json={**body, "checkpoint": "example/x:Q8_0"})
    assert again.json()["model"]["checkpoint"] == "example/x:Q8_0"
    assert client.post("/api/v1/delete", json={"model_name": "user.Registered"}).status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "model_name"),
        ({"model_name": "user.A", "checkpoint": "a/b:Q4"}, "recipe"),
        ({"model_name": "Plain", "recipe": "llamacpp", "checkpoint": "a/b:Q4"}, "model_name"),
        ({"model_name": "user.A", "recipe": "llamacpp"}, "checkpoint"),
        ({"model_name": "user.A", "recipe": "sd-cpp", "checkpoint": "a/b:Q4"}, "recipe"),
        (
            {
                "model_name": "user.A",
                "recipe": "llamacpp",
                "checkpoint": "a/b:Q4",
                "source": "modelscope",
            },
            "source",
        ),
        ({"model_name": "user.C", "recipe": "collection.omni", "components": ["x"]}, "components"),
        ({"model_name": "user.A", "recipe": "llamacpp", "models": []}, "models"),
    ],
)
def test_register_refuses_what_it_cannot_register(
    client: TestClient, body: dict[str, object], param: str
) -> None:
    r = client.post("/api/v1/models/register", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_aliases_bind_resolve_chain_and_delete(client: TestClient) -> None:
    """lemonade.md, `/internal/aliases`: `GET` lists `{alias, target, downloaded,
    recipe}`, `POST {alias, target}` binds (`target` "also accepted as `model`"),
    `DELETE` answers `{"status": "deleted"}`, "`404 Not Found` if the alias does not
    exist"; Lemonade's suite: a model fetched by alias shows the alias as its `id`, and
    "multi-hop chained alias resolution"."""
    assert client.get("/internal/aliases").json() == {"aliases": []}
    r = client.post("/internal/aliases", json={"alias": "my-alias", "target": SMOL})
    assert r.json() == {"status": "ok", "alias": "my-alias", "target": SMOL}
    hop = client.post("/internal/aliases", json={"alias": "hop", "model": "my-alias"})
    assert hop.status_code == 200
    for name in ("my-alias", "hop"):
        got = client.get(f"/api/v1/models/{name}").json()
        assert got["id"] == name and got["checkpoint"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    listed = client.get("/internal/aliases").json()["aliases"]
    assert listed == [
        {"alias": "hop", "target": "my-alias", "downloaded": True, "recipe": "llamacpp"},
        {"alias": "my-alias", "target": SMOL, "downloaded": True, "recipe": "llamacpp"},
    ]
    assert client.delete("/internal/aliases/hop").json() == {"status": "deleted", "alias": "hop"}
    assert client.get("/api/v1/models/hop").status_code == 404
    assert client.delete("/internal/aliases/hop").status_code == 404
    assert client.get("/api/v1/models/my-alias").status_code == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"target": SMOL}, "alias"),
        ({"alias": "a"}, "target"),
        ({"alias": "a", "target": "no-such-model"}, "target"),
        ({"alias": SMOL, "target": "Gemma-3-270M-GGUF"}, "alias"),
        ({"alias": "builtin.x", "target": SMOL}, "alias"),
        ({"alias": "extra.x", "target": SMOL}, "alias"),
        ({"alias": "a", "target": SMOL, "pinned": True}, "pinned"),
    ],
)
def test_bad_aliases_are_400s(client: TestClient, body: dict[str, object], param: str) -> None:
    """lemonade.md: "Returns HTTP `400 Bad Request` if required fields are missing or
    invalid"; an alias never shadows a model and never uses a reserved prefix."""
    r = client.post("/internal/aliases", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert client.get("/internal/aliases").json() == {"aliases": []}


def test_an_alias_loop_is_refused(client: TestClient) -> None:
    client.post("/internal/aliases", json={"alias": "a", "target": SMOL})
    client.post("/internal/aliases", json={"alias": "b", "target": "a"})
    r = client.post("/internal/aliases", json={"alias": "a", "target": "b"})
    assert r.status_code == 400
    assert client.get("/api/v1/models/b").json()["id"] == "b"


def test_builtin_canonical_names_resolve_to_the_bare_model(client: TestClient) -> None:
    """Lemonade's naming spec: "builtin.<name> resolves to the same model as the bare
    name"; "When the built-in is the precedence-winner ... the API emits the bare id"."""
    bare = client.get(f"/api/v1/models/{SMOL}").json()
    canonical = client.get(f"/api/v1/models/builtin.{SMOL}")
    assert canonical.status_code == 200
    assert canonical.json()["id"] == SMOL and canonical.json()["checkpoint"] == bare["checkpoint"]
    assert client.get("/api/v1/models/builtin.NoSuchModel").status_code == 404


@pytest.mark.parametrize(
    "name", ["extra.Rejected", "builtin.Rejected", "user.builtin.Hijack", "user.extra.Hijack"]
)
def test_pull_and_register_refuse_reserved_prefixes(client: TestClient, name: str) -> None:
    """Lemonade's naming spec: "/pull rejects extra.* / builtin.* model names, including
    as the bare-name part of a user.* alias (e.g. user.builtin.Foo)"; the answer says
    "reserved"."""
    body = {"model_name": name, "checkpoint": "acme/tiny-GGUF:Q8_0", "recipe": "llamacpp"}
    for route in ("/api/v1/pull", "/api/v1/models/register"):
        r = client.post(route, json=body)
        assert r.status_code == 400, r.text
        assert "reserved" in r.text.lower()


def test_deleting_an_unknown_model_is_422(client: TestClient) -> None:
    """Issue 24: "`DELETE` of an unknown model -> 422" (Lemonade's suite: "Test that
    deleting a non-existent model returns error ... Should return 422 Unprocessable
    Entity")."""
    r = client.post("/api/v1/delete", json={"model_name": "NonExistentModel-XYZ-123"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "model_name"
    # Ollama's delete keeps Ollama's 404.
    assert client.request("DELETE", "/api/delete", json={"model": "NonExistent"}).status_code == 404


def test_an_automatic_context_is_saved_and_resolved_from_the_model(client: TestClient) -> None:
    """lemonade.md: `resolved_ctx_size` is "the effective `ctx_size`, or the automatically
    computed size when that is `-1`": SmolLM2 was trained for 8,192 tokens, which fit."""
    r = client.post(options_url(), json={"ctx_size": -1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["saved"]["ctx_size"] == -1 and body["effective"]["ctx_size"] == -1
    assert body["resolved_ctx_size"] == 8192
    assert client.get(options_url()).json()["resolved_ctx_size"] == 8192
