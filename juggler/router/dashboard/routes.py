"""The dashboard: static files from the package (`dashboard/ui/`), served at / and /ui.

No build step and nothing fetched from elsewhere: the page is plain HTML, CSS and ES
modules. Only the files shipped in the package are served (looked up by name in a fixed
table, never by path), so these routes can be open without the API key: the page holds
no data; every API call it makes carries the key the user gave it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, Response

from juggler.errors import NotFound

router = APIRouter(include_in_schema=False)

#: Paths served without the API key (AuthMiddleware): the page and its static files.
OPEN_PREFIX = "/ui/"
OPEN_PAGES = frozenset({"/", "/ui", "/ui/"})

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_HEADERS = {
    # The page runs only its own scripts and talks only to this server; text from the
    # API (model names, log lines, answers) is always inserted as text, never as HTML.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def ui_files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, media type) for every file the package ships in ui/."""
    folder = resources.files("juggler.router.dashboard") / "ui"
    out: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _TYPES:
            out[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return out


def _serve(name: str) -> Response:
    found = ui_files().get(name)
    if found is None:
        raise NotFound(f"no dashboard file {name!r}")
    content, media_type = found
    return Response(content, media_type=media_type, headers=_HEADERS)


@router.get("/")
@router.get("/ui")
@router.get("/ui/")
async def index() -> Response:
    return _serve("index.html")


@router.get("/ui/{name}")
async def static_file(name: str) -> Response:
    return _serve(name)
