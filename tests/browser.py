"""Playwright for Python driving Debian's chromium (Playwright's own browser download
cannot work offline): how the browser tests and scripts/dashboard_screenshot.py start it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def why_no_browser() -> str | None:
    """None when the browser tests can run, else why they cannot."""
    if not CHROMIUM.exists():
        return (
            f"Debian's chromium is not installed at {CHROMIUM} "
            "(`make test` installs it with apt-get when run as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


def launch(playwright: Any) -> Any:
    """A headless chromium Browser from a started `sync_playwright()`."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)


#: How long a browser test waits for the page (model loads included).
WAIT_MS = 60_000


class Page:
    """A Playwright page with its console errors and uncaught exceptions collected."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _on_console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(message.text)
