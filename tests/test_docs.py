"""Docs that stay true (issue 50): "a fast test that every setting the server accepts
appears in the configuration page (and no removed one), every route the app serves
appears in the API reference, and every relative link in README and docs/ resolves."

Fast: the router app is built (nothing started, no model) only to list its routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from juggler.config import KEYS, Settings
from juggler.engine_args import NEUTRAL_FLAGS, SWITCH_FLAGS
from juggler.options import EngineFlags, env_name, flag_of

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
API = DOCS / "api.md"
#: The prefixes every OpenAI and Lemonade route lives under; the API reference names them
#: once, under `/v1`.
API_PREFIXES = ("/api/v1", "/v1")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _table_rows(text: str, first_cell: str) -> dict[str, list[str]]:
    """The rows of the markdown tables in `text` whose first cell matches `first_cell`
    (a regex with one group: the row's key), as key -> cells."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        match = re.fullmatch(first_cell, cells[0]) if cells else None
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} has two rows"
            rows[match.group(1)] = cells
    return rows


def _shown(value: Any) -> str:
    """A default as the configuration page writes it: JSON, strings bare (empty: "")."""
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


def _first_code(cell: str) -> str | None:
    match = re.search(r"`([^`]*)`", cell)
    return match.group(1) if match else None


# -- settings ------------------------------------------------------------------------------
def _settings_rows() -> dict[str, list[str]]:
    return _table_rows(CONFIGURATION.read_text(), r"`([a-z_]+)`")


def test_every_setting_has_one_row_with_its_environment_variable_and_default() -> None:
    """Issue 50: "configuration (every setting, its default, its environment variable and
    what it does, one table)", derived from the settings object, not from memory."""
    rows = _settings_rows()
    missing = [key for key in KEYS if key not in rows]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
    defaults = Settings().model_dump()
    for key in KEYS:
        cells = rows[key]
        assert len(cells) == 4, f"{key}: expected | key | default | variable | meaning |"
        assert _first_code(cells[2]) == env_name(key), f"{key}: variable {cells[2]!r}"
        assert cells[3], f"{key}: says nothing of what it does"
        if Settings.model_fields[key].default_factory is not None:
            assert cells[1], f"{key}: a default that depends on the machine says how"
            continue  # e.g. llamacpp_backend: what `make install` built here
        assert _first_code(cells[1]) == _shown(defaults[key]), (
            f"{key}: docs/configuration.md says the default is {cells[1]!r}, "
            f"the code says {_shown(defaults[key])!r}"
        )


def test_no_removed_setting_is_documented() -> None:
    """ "... and no removed one": a row for a key the server would refuse is a lie."""
    extra = sorted(set(_settings_rows()) - set(KEYS))
    assert not extra, f"docs/configuration.md documents settings the server refuses: {extra}"


def test_every_engine_flag_is_documented_with_its_default() -> None:
    """The engine flags `llamacpp_args` takes are settings too (per model): each has a
    row, with the default the engine uses, and no flag the engine refuses has one."""
    rows = _table_rows(CONFIGURATION.read_text(), r"`(--[a-z-]+)`")
    fields = EngineFlags.model_fields
    flags = {flag_of(name): name for name in fields}
    also = set(SWITCH_FLAGS) | set(NEUTRAL_FLAGS)  # llama-server's, which map onto these
    assert set(rows) - also == set(flags) and also <= set(rows), (
        f"missing: {sorted((set(flags) | also) - set(rows))}; "
        f"not engine flags: {sorted(set(rows) - set(flags) - also)}"
    )
    for flag, name in flags.items():
        default = fields[name].default
        shown = "null" if default is None else _shown(default)
        assert _first_code(rows[flag][1]) == shown, f"{flag}: {rows[flag][1]!r}, code: {shown}"


def test_the_table_reader_reads_rows() -> None:
    """The reader the tests above rely on: a row whose key is not documented is noticed."""
    text = "| key | default |\n|---|---|\n| `a_b` | `1` |\n| `c` | `x` (y) |\n"
    assert _table_rows(text, r"`([a-z_]+)`") == {"a_b": ["`a_b`", "`1`"], "c": ["`c`", "`x` (y)"]}
    assert _shown((1, 1)) == "[1, 1]" and _shown("") == '""' and _shown(None) == "null"


# -- routes ------------------------------------------------------------------------------
def _walk(routes: Iterable[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route, through included routers."""
    for route in routes:
        context = getattr(route, "include_context", None)
        if context is not None:
            yield from _walk(context.included_router.routes, prefix + context.prefix)
            continue
        router = getattr(route, "original_router", None)
        if router is not None:  # pragma: no cover - another FastAPI's included router
            yield from _walk(router.routes, prefix)
            continue
        path = getattr(route, "path_format", None) or route.path
        methods = set(getattr(route, "methods", None) or ())
        if methods - {"HEAD"}:
            methods.discard("HEAD")  # Starlette adds HEAD to every GET
        for method in methods:
            yield method, prefix + path


def _canonical(path: str) -> str:
    """One spelling per route: `/api/v1/x` and `/v1/x` are `/v1/x`; parameters `{}`; no
    query."""
    path = re.sub(r"\{[^}]*\}", "{}", path.partition("?")[0])
    return "/v1" + path.removeprefix("/api/v1") if path.startswith("/api/v1/") else path


def served_routes() -> set[tuple[str, str]]:
    from juggler.router.app import create_app

    app = create_app(Settings())
    served = {(m, _canonical(p)) for m, p in _walk(app.routes)}
    assert ("POST", "/v1/chat/completions") in served and ("POST", "/api/chat") in served
    return served


def documented_routes(text: str) -> set[tuple[str, str]]:
    """The routes the API reference's index names: `METHOD /path` in backticks."""
    found = re.findall(r"`(GET|POST|PUT|PATCH|DELETE|HEAD) (/[^`\s]*)`", text)
    return {(m, _canonical(p)) for m, p in found}


def test_every_route_the_router_serves_is_in_the_api_reference() -> None:
    """Issue 50: "every route the app serves appears in the API reference"."""
    missing = served_routes() - documented_routes(API.read_text())
    assert not missing, f"routes missing from docs/api.md: {sorted(missing)}"


def test_the_api_reference_names_no_route_the_router_does_not_serve() -> None:
    extra = documented_routes(API.read_text()) - served_routes()
    assert not extra, f"docs/api.md names routes nobody serves: {sorted(extra)}"


def test_both_prefixes_name_one_route() -> None:
    assert _canonical("/api/v1/models/{model_id}") == "/v1/models/{}"
    assert _canonical("/api/tags") == "/api/tags"
    assert _canonical("/v1/slots/{id}?action=erase") == "/v1/slots/{}"
    assert documented_routes("`GET /v1/models/{id}` and `HEAD /metrics`") == {
        ("GET", "/v1/models/{}"),
        ("HEAD", "/metrics"),
    }


# -- links ---------------------------------------------------------------------------------
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _without_code(text: str) -> str:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets -1, -2, ...)."""
    out: set[str] = set()
    for line in re.sub(r"```.*?```", "", text, flags=re.S).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in out:
            n += 1
            candidate = f"{slug}-{n}"
        out.add(candidate)
    return out


def _links(page: Path) -> list[str]:
    return LINK.findall(_without_code(page.read_text()))


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    """Issue 50: "every relative link in README and docs/ resolves" (to a file that
    exists, and a `#anchor` to a heading of it)."""
    broken = []
    for target in _links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_reader_sees_links_and_anchors() -> None:
    """The reader the test above relies on (an empty list of links would pass it)."""
    text = "# Two commands\n## Use it: OpenAI's SDK\n## Use it: OpenAI's SDK\n"
    assert anchors(text) == {"two-commands", "use-it-openais-sdk", "use-it-openais-sdk-1"}
    readme = _links(ROOT / "README.md")
    assert any(t.startswith("docs/") for t in readme), readme
    assert "x.md#y" in LINK.findall("see [a](x.md#y) and ![b](p.png)")
