"""Per-model settings that survive a restart: pins and saved load options.

`PinBook` keeps `$JUGGLER_HOME/pins.json`, one entry per model:

    {"Model": {"pinned": true, "options": {...}, "saved_options": {...}}}

- `pinned` + `options`: issue 11's "pins and per-model settings survive a server
  restart". The routes that pin or unpin (`/load` with `pinned`, `/internal/pin`,
  `/unload`) record the change once the manager made it; at start the router loads every
  pinned model again with the options it had.
- `saved_options`: Lemonade's `save_options` on `/api/v1/load` (its
  `recipe_options.json`): the options that load gave, used for every later load of the
  model, explicit or automatic, below the options a load gives itself (Lemonade's
  priority: load body > saved per-model options > CLI/env/config > defaults).

The manager stays the owner of what is loaded and pinned now; the book only remembers.
Writes are atomic (a temp file renamed over the old one), so a crash never leaves half
a file. A file from before saved options (`{"Model": {options}}`) reads as pins.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from juggler.errors import JugglerError
from juggler.manager.manager import Manager
from juggler.manager.snapshot import ServerSnapshot

log = logging.getLogger("juggler.router")
_KEYS = frozenset({"pinned", "options", "saved_options"})


class PinBook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, dict[str, Any]]:
        """Model name -> its entry; {} when there is no (readable) file."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        out: dict[str, dict[str, Any]] = {}
        for name, entry in data.items():
            if not isinstance(entry, dict):
                continue
            if entry and not (set(entry) & _KEYS):  # the first format: {name: options}
                entry = {"pinned": True, "options": entry}
            out[str(name)] = entry
        return out

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        data = {n: e for n, e in data.items() if e.get("pinned") or e.get("saved_options")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    # -- pins ----------------------------------------------------------------------------
    def pinned(self) -> dict[str, dict[str, Any]]:
        """Pinned model -> the options it was loaded with."""
        return {n: dict(e.get("options") or {}) for n, e in self.read().items() if e.get("pinned")}

    def record(self, snapshot: ServerSnapshot) -> None:
        """Remember `snapshot`'s pin (with its options), or forget it if unpinned."""
        data = self.read()
        entry = data.setdefault(snapshot.model_name, {})
        if snapshot.pinned:
            entry.update(pinned=True, options=snapshot.options.model_dump(mode="json"))
        elif not entry.pop("pinned", None):
            return
        else:
            entry.pop("options", None)
        self._write(data)

    def forget(self, names: list[str]) -> None:
        """These models were unloaded: they are no longer pinned (saved options stay)."""
        data = self.read()
        changed = False
        for name in names:
            entry = data.get(name)
            if entry and entry.pop("pinned", None):
                entry.pop("options", None)
                changed = True
        if changed:
            self._write(data)

    async def restore(self, manager: Manager) -> None:
        """Load every remembered pin again (start-up; one failure does not stop the rest)."""
        for name, options in self.pinned().items():
            try:
                await manager.load(name, options, pinned=True)
                log.info("restored pinned model %s", name)
            except JugglerError as exc:
                log.warning("could not restore pinned model %s: %s", name, exc.message)

    # -- saved options -------------------------------------------------------------------
    def saved_options(self, name: str) -> dict[str, Any]:
        """The options `save_options` stored for `name` ({} if none)."""
        return dict(self.read().get(name, {}).get("saved_options") or {})

    def save_options(self, name: str, options: Mapping[str, Any]) -> None:
        """Replace `name`'s saved options (Lemonade: "Any previously stored value for
        `model_name` is replaced"); empty options delete them."""
        data = self.read()
        entry = data.setdefault(name, {})
        given = {k: v for k, v in options.items() if v is not None}
        if given:
            entry["saved_options"] = given
        else:
            entry.pop("saved_options", None)
        self._write(data)

    def drop(self, name: str) -> None:
        """Forget everything about a deleted model."""
        data = self.read()
        if data.pop(name, None) is not None:
            self._write(data)
