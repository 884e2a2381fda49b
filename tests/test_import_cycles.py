"""No import circles in juggler/: an AST walk of every module, fast (nothing is imported).

What counts as an import (an arrow A -> B of the graph):

* `import x.y` and `from x.y import name` anywhere in A: at module level, inside a
  function (a lazy import still ties the two modules together: the issue lists
  `engine_args.py` <-> `options.py`, whose one side is an import inside a function), and
  inside `if TYPE_CHECKING:` too. A circle made only of type names is no runtime error,
  but it is still two modules that cannot be read or changed apart, and the issue lists
  two such circles (`session.py` <-> `speculation.py`, `snapshot.py` <-> `worker.py`),
  so it counts here. The mend is to move the shared names where both may import them.
* Relative imports are resolved against A's package. `from pkg import name` goes to the
  submodule `pkg.name` when there is one, otherwise to `pkg` (its `__init__.py`).
* An import names the module it names: importing `a.b.c` is not counted as importing
  the packages `a` and `a.b` (their `__init__.py` runs, but that is Python's, not ours).
* Imports of anything outside juggler/ (stdlib, third party) are no arrows.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Arrow:
    """One import statement of `source` that names `target` (both dotted modules)."""

    source: str
    target: str
    path: str
    line: int


def module_name(path: Path, root: Path) -> str:
    """`juggler/engine/worker/kv.py` -> `juggler.engine.worker.kv`; a package's
    `__init__.py` is the package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by dotted name."""
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def _resolve(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Iterable[str]
) -> list[str]:
    """The modules of `known` that one import statement names."""
    known = set(known)
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [_longest_known(n, known) for n in names if _longest_known(n, known)]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    found: list[str] = []
    for alias in node.names:
        sub = f"{base}.{alias.name}" if base else alias.name
        if sub in known:
            found.append(sub)
        elif target := _longest_known(base, known):
            found.append(target)
    return found


def _longest_known(dotted: str, known: set[str]) -> str:
    """The longest prefix of `dotted` that is a module of ours ("" if none)."""
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return ""


def import_arrows(root: Path, package: str) -> list[Arrow]:
    """Every import between two modules of `package`, wherever it stands in the file."""
    modules = find_modules(root, package)
    arrows: list[Arrow] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in dict.fromkeys(_resolve(node, module, is_package, modules)):
                if target != module:
                    rel = path.relative_to(root).as_posix()
                    arrows.append(Arrow(module, target, rel, node.lineno))
    return arrows


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative (no recursion limit); each
    component sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def import_circles(root: Path, package: str) -> list[list[Arrow]]:
    """Each circle (a component of more than one module) as the arrows inside it."""
    arrows = import_arrows(root, package)
    graph: dict[str, set[str]] = {}
    for arrow in arrows:
        graph.setdefault(arrow.source, set()).add(arrow.target)
    circles = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            members = set(component)
            inside = [a for a in arrows if a.source in members and a.target in members]
            circles.append(sorted(inside, key=lambda a: (a.path, a.line)))
    return circles


def describe(circles: list[list[Arrow]]) -> str:
    lines = []
    for n, circle in enumerate(circles, 1):
        modules = sorted({a.source for a in circle})
        lines.append(f"circle {n}: {', '.join(modules)}")
        lines += [f"  {a.path}:{a.line}: {a.source} -> {a.target}" for a in circle]
    return "\n".join(lines)


def test_juggler_has_no_import_circles() -> None:
    """Issue 25: "**No import circles** anywhere, and a fast test that fails when one
    appears (an AST walk of `juggler/` is enough)"."""
    circles = import_circles(ROOT, "juggler")
    assert not circles, (
        "import circles (move the shared names into a module both import; see this "
        "file's docstring):\n" + describe(circles)
    )


def test_the_walk_reads_juggler() -> None:
    """The walk reads the real tree (an empty graph would pass the test above): every
    package of juggler/ has modules with arrows, a plain import and one under
    `if TYPE_CHECKING:` among them."""
    arrows = import_arrows(ROOT, "juggler")
    sources = {a.source for a in arrows}
    assert len(arrows) > 300
    for package in ("api", "cli", "engine", "manager", "registry", "router"):
        assert any(s.startswith(f"juggler.{package}.") for s in sources), package
    pairs = {(a.source, a.target) for a in arrows}
    assert ("juggler.engine.worker.worker", "juggler.engine.worker.kv") in pairs
    assert ("juggler.engine.worker.session", "juggler.engine.worker.speculation") in pairs


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    """The test can fail: a circle through a lazy import, a relative import and a
    TYPE_CHECKING import in a planted package is reported with its lines."""
    _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import B\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/sub/__init__.py": "",
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
            ),
            "pkg/sub/d.py": "import os\nfrom .. import a\nfrom ..sub import e\n",
            "pkg/sub/e.py": "from pkg.sub.d import x\n",
            "pkg/clean.py": "import pkg.a\nfrom pkg import b\n",
        },
    )
    circles = import_circles(tmp_path, "pkg")
    found = [sorted({a.source for a in circle}) for circle in circles]
    assert found == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.sub.d", "pkg.sub.e"]]
    text = describe(circles)
    assert "pkg/b.py:2: pkg.b -> pkg.c" in text
    assert "pkg/c.py:3: pkg.c -> pkg.a" in text
    assert "pkg.clean" not in text


def test_tarjan_handles_long_chains_without_recursion() -> None:
    """Iterative: a chain far deeper than Python's recursion limit, closed into one
    ring, is one component; left open, it is all singletons."""
    n = 5000
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(n)}
    assert all(len(c) == 1 for c in strongly_connected(chain))
    ring = {**chain, f"m{n}": {"m0"}}
    assert [len(c) for c in strongly_connected(ring)] == [n + 1]
