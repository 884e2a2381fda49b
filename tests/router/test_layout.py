"""The router's rooms (issue 25): one package per face of the server over one core package.

An AST walk (the import arrows of tests/test_import_cycles.py), fast: nothing is imported.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_import_cycles import ROOT, Arrow, import_arrows

ROUTER = ROOT / "juggler" / "router"
#: One sub-package per face of the server.
FACES = ("openai", "ollama", "anthropic", "lemonade", "gateway", "dashboard")
#: What the faces share.
CORE = "juggler.router.core"


def _package_of(module: str) -> str:
    """`juggler.router.ollama.routes` -> `juggler.router.ollama`; other modules: itself."""
    parts = module.split(".")
    return ".".join(parts[:3]) if module.startswith("juggler.router.") else module


def _router_arrows() -> list[Arrow]:
    return [a for a in import_arrows(ROOT, "juggler") if a.target.startswith("juggler.router")]


def test_the_router_is_a_few_files_over_one_package_per_face() -> None:
    """Issue 25: "`router/` has no more than about 12 files at its top level; each dialect
    is one sub-package" (and what they share, one core package under them)."""
    top = sorted(p.name for p in ROUTER.iterdir() if p.is_file() and p.suffix == ".py")
    assert len(top) <= 12, top
    packages = {p.name for p in ROUTER.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {*FACES, "core"}


def test_each_face_stands_on_core_alone() -> None:
    """ "A newcomer who must fix an Ollama bug opens one folder": a face imports core and
    the rest of Juggler, never another face; core imports no face (the app, at the top,
    puts them together)."""
    crossings = []
    for arrow in _router_arrows():
        source, target = _package_of(arrow.source), _package_of(arrow.target)
        inside = arrow.source.startswith("juggler.router.") and source != "juggler.router.app"
        if inside and source != target and target != CORE:
            crossings.append(f"{arrow.path}:{arrow.line}: {arrow.source} -> {arrow.target}")
    assert not crossings, "\n".join(crossings)


def test_the_shared_wire_formats_do_not_reach_into_the_router() -> None:
    """`juggler/api` holds what the router and the engine share; what only one face uses
    lives in that face's package, so nothing in `juggler/api` imports the router."""
    up = [a for a in _router_arrows() if a.source.startswith("juggler.api")]
    assert not up, up


def test_the_walk_sees_the_faces() -> None:
    """The walk reads the real tree (an empty graph would pass the tests above): every
    face imports core."""
    sources = {_package_of(a.source) for a in _router_arrows() if a.target.startswith(CORE)}
    for face in FACES:
        if face != "dashboard":  # static files: needs nothing of core
            assert f"juggler.router.{face}" in sources, face
    assert any(p.name == "index.html" for p in Path(ROUTER / "dashboard" / "ui").iterdir())
