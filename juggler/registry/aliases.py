"""Model aliases and Lemonade's naming rules for names that are not models themselves.

Lemonade's `/internal/aliases` binds an alias to a target "model name or canonical ID";
an alias may name another alias ("multi-hop chained alias resolution"). They live in
`aliases.json` beside `user_models.json` and are written under the same lock discipline
(`edited_json`). A model's own name always wins over an alias, so an alias never shadows
a model; an alias may not use a reserved prefix, and a chain may not loop.

Lemonade's naming spec also gives every built-in model a canonical alias:
`builtin.NAME` "resolves to the same model as the bare name".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from juggler.errors import BadRequest, NotFound
from juggler.registry.locks import edited_json

BUILTIN_PREFIX = "builtin."
#: Prefixes no client may register a model or an alias under, with why (Lemonade's
#: naming spec: `extra.*` and `builtin.*`, also as the bare part of `user.*`).
RESERVED_PREFIXES: dict[str, str] = {
    "extra.": "extra.* names are reserved for models found in model directories",
    "builtin.": "builtin.* names are reserved for the built-in models' canonical names",
    "user.extra.": "user.extra.* would take an extra.* name's place: the prefix is reserved",
    "user.builtin.": "user.builtin.* would take a builtin.* name's place: the prefix is reserved",
}
#: Most hops from an alias to its model.
MAX_HOPS = 16
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,127}$")


def reserved_reason(name: str) -> str | None:
    """Why `name` may not be registered (a reserved prefix), or None. Pure."""
    for prefix, why in RESERVED_PREFIXES.items():
        if name.startswith(prefix):
            return why
    return None


def follow(aliases: Mapping[str, str], name: str) -> str:
    """The name at the end of `name`'s alias chain (`name` itself if it is no alias).
    Pure; raises BadRequest for a loop or a chain longer than MAX_HOPS."""
    seen = [name]
    while name in aliases:
        name = aliases[name]
        if name in seen or len(seen) > MAX_HOPS:
            raise BadRequest(f"alias chain {' -> '.join([*seen, name])} does not end in a model")
        seen.append(name)
    return name


class AliasBook:
    """`aliases.json`: alias -> target. `is_model(name)` tells a model's own name."""

    def __init__(self, path: Path, is_model: Callable[[str], bool]) -> None:
        self.path = path
        self._is_model = is_model

    def read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}

    def resolve(self, name: str) -> str | None:
        """The model `name` names through aliases, or None when it is no alias."""
        aliases = self.read()
        return follow(aliases, name) if name in aliases else None

    def bind(self, alias: str, target: str) -> None:
        """Create or update `alias`; a 400 names what is wrong with it."""
        if not _ALIAS_RE.match(alias):
            raise BadRequest(f"alias {alias!r} is not a valid name", param="alias")
        if why := reserved_reason(alias):
            raise BadRequest(f"{alias!r}: {why}", param="alias")
        if self._is_model(alias):
            raise BadRequest(f"{alias!r} is a model's own name, not an alias", param="alias")
        with edited_json(self.path) as entries:
            chain = {**entries, alias: target}
            end = follow(chain, alias)
            if not self._is_model(end):
                raise BadRequest(f"alias target {target!r} is not a model", param="target")
            entries[alias] = target

    def remove(self, alias: str) -> None:
        with edited_json(self.path) as entries:
            if alias not in entries:
                raise NotFound(f"alias {alias!r} does not exist", param="alias")
            del entries[alias]
