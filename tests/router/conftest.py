"""Browser fixtures for the dashboard tests: one chromium per module, a fresh context
per test whose page is saved as a screenshot under the test's tmp dir at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import WAIT_MS, Page, launch


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser: Any, tmp_path: Path) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    p = Page(context.new_page())
    p.page.set_default_timeout(WAIT_MS)
    try:
        yield p
    finally:
        p.page.screenshot(path=str(tmp_path / "screenshot.png"), full_page=True)
        context.close()
