"""Issue 22 on a real server: no web page can change settings or read answers, whatever
route it aims at, while curl-style clients and the server's own pages keep working."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler.config import Settings
from juggler.router.app import create_app
from tests.browser import launch, why_no_browser
from tests.conftest import RunningServer, start_server
from tests.manager.conftest import SMOLLM

pytestmark = pytest.mark.slow
EVIL = "http://evil.example"


def app_routes() -> list[tuple[str, str]]:
    """Every (method, path) the router serves, from the app itself (so a new route is
    covered the day it is added)."""
    app = create_app(Settings())

    def walk(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
        for r in routes:
            if hasattr(r, "original_router"):  # FastAPI's included router
                yield from walk(r.original_router.routes, prefix + r.include_context.prefix)
            elif hasattr(r, "path"):
                for method in sorted(getattr(r, "methods", None) or {"GET"}):
                    if method != "HEAD":
                        yield method, prefix + r.path

    found = sorted(set(walk(app.routes)))
    assert len(found) > 80, found  # the walk found the dialects' routes
    return found


ROUTES = app_routes()
FAMILIES = {
    "openai": "/v1/chat/completions",
    "ollama": "/api/chat",
    "lemonade": "/api/v1/load",
    "internal": "/internal/set",
    "logs": "/api/v1/logs",
    "uploads": "/api/blobs/{digest}",
    "sessions": "/api/v1/sessions",
    "adapters": "/v1/load_lora_adapter",
}


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    s = start_server(tmp_path_factory.mktemp("door"), "--model", "")
    try:
        yield s
    finally:
        s.stop()


def test_every_route_family_is_enumerated() -> None:
    paths = {p for _, p in ROUTES}
    for family, path in FAMILIES.items():
        assert path in paths, f"{family}: {path} is not a route any more; update FAMILIES"


def test_every_route_refuses_a_foreign_host_a_foreign_origin_and_a_text_body(
    server: RunningServer,
) -> None:
    """Issue 22: for each route family "a foreign Host -> 403; a foreign Origin -> 403;
    text/plain POST -> 415; the same requests from the server's own origin and from
    curl-style clients (no Origin) -> work", checked on every route the app has."""
    own = server.base_url
    host = own.removeprefix("http://")
    failures: list[str] = []
    with httpx.Client(base_url=own, timeout=30) as c:
        for method, path in ROUTES:
            url = concrete(path)
            body = b"{}" if method in ("POST", "PUT", "PATCH", "DELETE") else None
            json_type = {"Content-Type": "application/json"} if body else {}

            def send(
                headers: dict[str, str], m: str = method, u: str = url, b: bytes | None = body
            ) -> httpx.Response:
                return c.request(m, u, headers=headers, content=b)

            r = send({"Host": "evil.example", **json_type})
            if r.status_code != 403 or "allowed_hosts" not in r.text:
                failures.append(f"{method} {path}: foreign Host -> {r.status_code}")
            r = send({"Origin": EVIL, **json_type})
            if r.status_code != 403 or "cors_origins" not in r.text:
                failures.append(f"{method} {path}: foreign Origin -> {r.status_code}")
            if body is not None and not path.startswith("/api/blobs/"):
                r = send({"Content-Type": "text/plain"})
                if r.status_code != 415:
                    failures.append(f"{method} {path}: text/plain body -> {r.status_code}")
            for who, headers in (("own origin", {"Origin": own}), ("curl", {})):
                r = send({**headers, **json_type, "Host": host})
                if r.status_code in (403, 415):
                    failures.append(f"{method} {path}: {who} -> {r.status_code} {r.text[:120]}")
    assert not failures, "\n".join(failures)


def test_a_preflight_is_answered_for_listed_origins_only(tmp_path: Path) -> None:
    """Issue 22: "CORS preflight (OPTIONS) is answered correctly for allowed origins and
    refused for others"."""
    app_origin = "http://app.example:3000"
    s = start_server(tmp_path, "--model", "", env={"JUGGLER_CORS_ORIGINS": app_origin})
    try:
        preflight = {"Access-Control-Request-Method": "POST"}
        with httpx.Client(base_url=s.base_url, timeout=30) as c:
            ok = c.options("/v1/chat/completions", headers={"Origin": app_origin, **preflight})
            assert ok.status_code == 200
            assert ok.headers["access-control-allow-origin"] == app_origin
            bad = c.options("/v1/chat/completions", headers={"Origin": EVIL, **preflight})
            assert bad.status_code == 403 and "access-control-allow-origin" not in bad.headers
            listed = c.get("/v1/models", headers={"Origin": app_origin})
            assert listed.status_code == 200
            assert listed.headers["access-control-allow-origin"] == app_origin
    finally:
        s.stop()


def test_curl_style_bodies_still_work(server: RunningServer) -> None:
    """`curl -d '{...}'` (no -H) sends application/x-www-form-urlencoded; Ollama's docs show
    exactly that, so a non-browser client may. A browser sending it is refused (415)."""
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        r = c.post("/api/v1/load", content=b'{"model_name": "nope"}', headers=form)
        assert r.status_code == 404, r.text  # parsed as JSON: the model is unknown
        r = c.post(
            "/api/v1/load",
            content=b'{"model_name": "nope"}',
            headers={**form, "Sec-Fetch-Site": "same-origin", "Origin": server.base_url},
        )
        assert r.status_code == 415


ATTACK_PAGE = """<!doctype html><html><body><script>
const target = "TARGET";
window.results = {};
async function attempt(name, fn) {
  try { const r = await fn(); window.results[name] = r.type + ":" + r.status; }
  catch (e) { window.results[name] = "error:" + e.name; }
}
(async () => {
  const text = {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}};
  await attempt("set", () => fetch(target + "/internal/set",
      {...text, body: JSON.stringify({max_loaded_models: 7})}));
  await attempt("pull", () => fetch(target + "/api/v1/pull", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "application/x-www-form-urlencoded"},
      body: JSON.stringify({model_name: "user.evil", checkpoint: "/etc/hostname"})}));
  await attempt("blob", () => fetch(target + "/api/v1/pull", {method: "POST", mode: "no-cors",
      body: new Blob([JSON.stringify({model_name: "user.evil2", checkpoint: "/etc/hostname"})])}));
  await attempt("health", () => fetch(target + "/api/v1/health"));
  await attempt("logs", () => fetch(target + "/api/v1/logs"));
  await attempt("json", () => fetch(target + "/internal/set", {method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({max_loaded_models: 9})}));
  window.done = true;
})();
</script></body></html>"""


@pytest.mark.skipif(why_no_browser() is not None, reason=str(why_no_browser()))
def test_a_page_from_another_origin_can_neither_change_nor_read(
    server: RunningServer, tmp_path: Path
) -> None:
    """Issue 22: "A Chromium test: a page served from another port/origin tries fetch()
    with no-cors and cors modes against the server; nothing changes and nothing is read."""
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(ATTACK_PAGE.replace("TARGET", server.base_url))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(site), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    before = server.health()["max_models"]
    try:
        with sync_playwright() as p:
            browser = launch(p)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/index.html")
                page.wait_for_function("window.done === true", timeout=60_000)
                results = page.evaluate("window.results")
            finally:
                browser.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    # no-cors answers are opaque (status 0), cors ones fail: nothing was read.
    for name in ("set", "pull", "blob"):
        assert results[name] == "opaque:0", results
    for name in ("health", "logs", "json"):
        assert results[name] == "error:TypeError", results
    assert server.health()["max_models"] == before  # nothing changed
    with server.client() as c:
        names = {
            m["id"] for m in c.get("/api/v1/models", params={"show_all": "true"}).json()["data"]
        }
    assert not {"user.evil", "user.evil2"} & names


def test_the_owner_registers_a_local_gguf_without_keys_and_chats(tmp_path: Path) -> None:
    """Issue 22: "from a fresh home with no keys, `juggler pull user.mine --checkpoint
    <file outside the cache>` then chat with it -> works"."""
    outside = tmp_path / "elsewhere" / "mine.gguf"
    outside.parent.mkdir()
    shutil.copy(SMOLLM, outside)
    s = start_server(tmp_path / "srv", "--model", "", "--ctx-size", "1024")
    try:
        port = s.base_url.rsplit(":", 1)[1]
        env = {"JUGGLER_HOME": str(s.home), "JUGGLER_PORT": port}
        juggler = [sys.executable, "-m", "juggler"]
        pulled = subprocess.run(
            [*juggler, "pull", "user.mine", "--checkpoint", str(outside)],
            env={**_clean_env(), **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
        with s.client() as c:
            r = c.post(
                "/v1/chat/completions",
                json={
                    "model": "user.mine",
                    "messages": [{"role": "user", "content": "Say hi"}],
                    "max_tokens": 8,
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"]
            # A browser on the same machine may not do the same.
            r = c.post(
                "/api/v1/pull",
                json={"model_name": "user.theirs", "checkpoint": str(outside)},
                headers={"Origin": s.base_url},
            )
            assert r.status_code == 403
    finally:
        s.stop()


def test_with_an_admin_key_the_cli_sends_it_from_the_config_file(tmp_path: Path) -> None:
    """Issue 22: "with an admin key, the admin key rules as today ... The CLI sends the
    admin key from the config file when it can read it, so the owner's CLI always works."""
    outside = tmp_path / "elsewhere" / "mine.gguf"
    outside.parent.mkdir()
    shutil.copy(SMOLLM, outside)
    s = start_server(tmp_path / "srv", "--model", "", env={"JUGGLER_ADMIN_API_KEY": "k-admin"})
    try:
        port = s.base_url.rsplit(":", 1)[1]
        (s.home / "config.json").write_text('{"admin_api_key": "k-admin"}\n')
        with s.client() as c:  # no key: refused
            r = c.post("/api/v1/pull", json={"model_name": "user.a", "checkpoint": str(outside)})
            assert r.status_code == 403
        pulled = subprocess.run(
            [sys.executable, "-m", "juggler", "pull", "user.mine", "--checkpoint", str(outside)],
            env={**_clean_env(), "JUGGLER_HOME": str(s.home), "JUGGLER_PORT": port},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    finally:
        s.stop()


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
