"""Take a screenshot of a running Juggler's dashboard (the picture in docs/cli.md).

    .venv/bin/python scripts/dashboard_screenshot.py http://127.0.0.1:13305 docs/dashboard.png \
        [--tab models] [--width 1280] [--height 560]

Uses Playwright with Debian's chromium (/usr/bin/chromium), as the browser tests do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.browser import launch, why_no_browser


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("--tab", default="models")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=560)
    parser.add_argument("--key", default="", help="the server's API key, if it has one")
    args = parser.parse_args()
    reason = why_no_browser()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(args.url.rstrip("/") + "/")
        if args.key:
            page.evaluate("(k) => sessionStorage.setItem('juggler.apiKey', k)", args.key)
        page.goto(args.url.rstrip("/") + f"/#{args.tab}")
        page.wait_for_selector("#models-table tbody tr", state="attached")
        page.wait_for_timeout(2500)  # a few polls: live charts fill in, toasts go
        page.screenshot(path=str(args.out))
        browser.close()
    print(f"{args.out}: {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
