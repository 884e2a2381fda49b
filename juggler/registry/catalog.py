"""The model catalog: built-in models (catalog.json) plus the user's `user.*` models.

User models live in `user_models.json` in the config directory. Only the router process
writes that file (through `Registry.add_user_model` / `remove_user_model`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

from juggler.config import juggler_home
from juggler.errors import BadRequest, ModelNotFound
from juggler.registry.checkpoint import parse_checkpoint
from juggler.registry.locks import exclusive, temp_beside
from juggler.types import Device, ModelInfo

_NAME_RE = re.compile(r"^user\.[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
KNOWN_RECIPES = (
    "llamacpp",
    "command",
    "flm",
    "ryzenai-llm",
    "oga-hybrid",
    "oga-npu",
    "oga-cpu",
    "whispercpp",
)


def _info(name: str, entry: dict[str, Any]) -> ModelInfo:
    return ModelInfo(
        name=name,
        checkpoint=str(entry.get("checkpoint", "")),
        recipe=str(entry.get("recipe", "llamacpp")),
        labels=tuple(str(x) for x in entry.get("labels", ())),
        size_gb=entry.get("size_gb"),
        suggested=bool(entry.get("suggested", True)),
        command=entry.get("command"),
        health_path=str(entry.get("health_path", "/health")),
        device=entry.get("device"),
    )


def _entry(info: ModelInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "checkpoint": info.checkpoint,
        "recipe": info.recipe,
        "labels": list(info.labels),
    }
    if info.size_gb is not None:
        out["size_gb"] = info.size_gb
    if info.command:
        out["command"] = info.command
        out["health_path"] = info.health_path
    if info.device:
        out["device"] = info.device
    return out


class Registry:
    """Looks up models by name. Reads the user file on every call so that a `juggler pull`
    from another process is seen without a restart."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home
        raw = json.loads(files("juggler.registry").joinpath("catalog.json").read_text())
        self._builtin = {name: _info(name, entry) for name, entry in raw.items()}

    @property
    def user_file(self) -> Path:
        return (self.home or juggler_home()) / "user_models.json"

    def _user_entries(self) -> dict[str, Any]:
        path = self.user_file
        if not path.exists():
            return {}
        data = json.loads(path.read_text() or "{}")
        return data if isinstance(data, dict) else {}

    def list(self) -> list[ModelInfo]:
        users = [_info(n, e) for n, e in sorted(self._user_entries().items())]
        return [*self._builtin.values(), *users]

    def get(self, name: str) -> ModelInfo:
        found = self.find(name)
        if found is None:
            raise ModelNotFound(f"model {name!r} not found", param="model")
        return found

    def find(self, name: str) -> ModelInfo | None:
        if name in self._builtin:
            return self._builtin[name]
        entry = self._user_entries().get(name)
        return _info(name, entry) if entry is not None else None

    def add_user_model(
        self,
        name: str,
        *,
        checkpoint: str,
        recipe: str = "llamacpp",
        labels: tuple[str, ...] = (),
        command: str | None = None,
        health_path: str = "/health",
        device: str | None = None,
    ) -> ModelInfo:
        """Register (or replace) a user model; raises BadRequest naming the bad field."""
        if not _NAME_RE.match(name):
            raise BadRequest(
                f"user model names look like user.NAME (letters, digits, _.-), got {name!r}",
                param="model_name",
            )
        if recipe not in KNOWN_RECIPES:
            raise BadRequest(
                f"unknown recipe {recipe!r}; use one of {', '.join(KNOWN_RECIPES)}", param="recipe"
            )
        if recipe == "command":
            if not command or "{port}" not in command:
                raise BadRequest(
                    "a command model needs a command template with {port}", param="command"
                )
            try:
                shlex.split(command)
            except ValueError as exc:
                raise BadRequest(f"command: {exc}", param="command") from None
        elif not checkpoint:
            raise BadRequest("checkpoint is required", param="checkpoint")
        if checkpoint:
            try:
                parse_checkpoint(checkpoint)
            except ValueError as exc:
                raise BadRequest(str(exc), param="checkpoint") from None
        if device:
            try:
                Device.parse(device)
            except ValueError as exc:
                raise BadRequest(str(exc), param="device") from None
        info = ModelInfo(
            name=name,
            checkpoint=checkpoint,
            recipe=recipe,
            labels=tuple(labels),
            command=command,
            health_path=health_path,
            device=device,
        )
        with self._editing() as entries:
            entries[name] = _entry(info)
        return info

    def remove_user_model(self, name: str) -> None:
        with self._editing() as entries:
            if name not in entries:
                raise ModelNotFound(f"model {name!r} not found", param="model_name")
            del entries[name]

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write of the user file under its lock (the server and a CLI may
        both write it); the new file replaces the old one atomically."""
        path = self.user_file
        with exclusive(path):
            entries = self._user_entries()
            yield entries
            tmp = temp_beside(path)
            try:
                tmp.write_text(json.dumps(entries, indent=2) + "\n")
                tmp.replace(path)
            finally:
                tmp.unlink(missing_ok=True)
