"""A backend re-checks the LoRA adapter path it is handed (issue 27: "A backend re-checks
any path it is handed against the allowed folders").

The router names the adapter of a request in `juggler_adapter` ({id, path}), a field
only the router may send (every backend route needs the backend key). Should that key
leak, the path is still not the caller's to choose: the backend opens only a file that
is a registered adapter's, read from the router's `adapters.json` (written only after
the router's own checks), whose path reaches the backend in `JUGGLER_ADAPTER_BOOK` at
spawn. Compared after resolving symlinks and `..`, so no spelling of another file
passes. A backend started without the variable (by hand, for development) serves no
adapter at all.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from juggler.errors import Forbidden

#: The environment variable with the path of the router's `adapters.json`.
ENV = "JUGGLER_ADAPTER_BOOK"


def _registered(book: Path) -> set[Path]:
    try:
        entries = json.loads(book.read_text() or "{}")
    except (OSError, ValueError):
        return set()
    if not isinstance(entries, dict):
        return set()
    paths = (e.get("path") for e in entries.values() if isinstance(e, dict))
    return {Path(p).resolve() for p in paths if isinstance(p, str) and p}


def check_adapter_path(path: str, *, book: str | None = None) -> None:
    """Forbidden unless `path` is a registered adapter's file (see the module doc)."""
    book = book if book is not None else os.environ.get(ENV, "")
    if not book:
        raise Forbidden(
            "this backend serves no LoRA adapters (it was not started by a router)",
            param="juggler_adapter",
        )
    if not path or "\0" in path or not Path(path).is_absolute():
        raise Forbidden("the adapter path is not a registered adapter", param="juggler_adapter")
    if Path(path).resolve() not in _registered(Path(book)):
        raise Forbidden("the adapter path is not a registered adapter", param="juggler_adapter")
