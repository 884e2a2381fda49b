"""Pinned models survive a restart (issue 11: "pins and per-model settings survive a
server restart").

`PinBook` keeps `$JUGGLER_HOME/pins.json`: for each pinned model, the options it was
loaded with. The routes that pin or unpin (`/load` with `pinned`, `/internal/pin`,
`/unload`) record the change once the manager made it; at start the router loads every
pinned model again with its options and its pin. The manager stays the owner of what is
pinned now; the book only remembers it across restarts. Writes are atomic (a temp file
renamed over the old one), so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from juggler.errors import JugglerError
from juggler.manager.manager import Manager
from juggler.manager.snapshot import ServerSnapshot

log = logging.getLogger("juggler.router")


class PinBook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, dict[str, Any]]:
        """Model name -> its load options; {} when there is no (readable) file."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    def record(self, snapshot: ServerSnapshot) -> None:
        """Remember `snapshot`'s pin (with its options), or forget it if unpinned."""
        data = self.read()
        if snapshot.pinned:
            data[snapshot.model_name] = snapshot.options.model_dump(mode="json")
        elif data.pop(snapshot.model_name, None) is None:
            return
        self._write(data)

    def forget(self, names: list[str]) -> None:
        data = self.read()
        if any(data.pop(n, None) is not None for n in names):
            self._write(data)

    async def restore(self, manager: Manager) -> None:
        """Load every remembered pin again (start-up; one failure does not stop the rest)."""
        for name, options in self.read().items():
            try:
                await manager.load(name, options, pinned=True)
                log.info("restored pinned model %s", name)
            except JugglerError as exc:
                log.warning("could not restore pinned model %s: %s", name, exc.message)
