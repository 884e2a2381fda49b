"""The dashboard's files and the logs route, in-process (no model loaded): the page is
served without a key from the package only, offline; the API it calls keeps its key."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.dashboard.routes import ui_files

#: The base URL of in-process clients: a Host that names the server (issue 22).
LOCAL = "http://127.0.0.1"

KEY = {"Authorization": "Bearer user-key"}


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model="", api_key="user-key"), Registry(home=tmp_path / "home"))
    # A loopback peer, as the page on the same machine: the logs answer it (no admin key).
    return TestClient(
        app, base_url=LOCAL, raise_server_exceptions=False, client=("127.0.0.1", 50000)
    )


def test_the_page_is_served_at_root_and_ui_without_a_key(client: TestClient) -> None:
    with client as c:
        for path in ("/", "/ui", "/ui/"):
            r = c.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in r.headers["content-security-policy"]
            assert '<script type="module" src="/ui/app.js">' in r.text
        js = c.get("/ui/app.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert c.get("/ui/style.css").headers["content-type"].startswith("text/css")


def test_every_file_the_page_and_its_modules_name_is_served(client: TestClient) -> None:
    with client as c:
        index = c.get("/").text
        wanted = set(re.findall(r'(?:src|href)="/ui/([^"]+)"', index))
        for name, (content, _) in ui_files().items():
            if name.endswith(".js"):
                wanted |= set(re.findall(r'from "\./([^"]+)"', content.decode()))
        assert {"app.js", "style.css", "api.js", "models.js", "live.js"} <= wanted
        for name in wanted:
            assert c.get(f"/ui/{name}").status_code == 200, name


def test_the_page_works_offline_it_names_no_other_host() -> None:
    for name, (content, _) in ui_files().items():
        text = content.decode()
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), name


def test_only_the_packaged_files_are_served(client: TestClient) -> None:
    with client as c:
        for path in ("/ui/nope.js", "/ui/..%2fapp.py", "/ui/%2e%2e/app.py", "/ui/__init__.py"):
            r = c.get(path)
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "not_found"


def test_the_api_behind_the_page_still_needs_the_key(client: TestClient) -> None:
    with client as c:
        assert c.get("/api/v1/health").status_code == 401
        assert c.get("/api/v1/logs").status_code == 401
        assert c.get("/ui/../api/v1/logs").status_code in (401, 404)
        assert c.get("/api/v1/health", headers=KEY).status_code == 200


def test_logs_returns_the_routers_records_and_a_cursor(client: TestClient) -> None:
    with client as c:
        logging.getLogger("juggler.router").warning("dashboard marker %d", 42)
        r = c.get("/api/v1/logs", params={"source": "router", "contains": "MARKER"}, headers=KEY)
        assert r.status_code == 200
        body = r.json()
        assert [line["text"] for line in body["lines"]] == ["juggler.router: dashboard marker 42"]
        assert body["lines"][0]["level"] == "warning"
        assert {"name": "router", "num_lines": body["sources"][0]["num_lines"]} in body["sources"]
        again = c.get("/api/v1/logs", params={"since": body["next"]}, headers=KEY).json()
        assert again["lines"] == []


@pytest.mark.parametrize(
    "params", [{"since": "-1"}, {"level": "loud"}, {"limit": "0"}, {"limit": "x"}]
)
def test_a_bad_logs_query_is_a_400_naming_it(client: TestClient, params: dict[str, str]) -> None:
    with client as c:
        r = c.get("/api/v1/logs", params=params, headers=KEY)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == next(iter(params))
