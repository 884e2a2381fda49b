"""Registered LoRA adapters (seed 004's "Dynamically Register/Unregister Adapters").

An adapter is an id (what clients name as the model), a GGUF LoRA file and the base model
it was trained for. `AdapterBook` keeps them in `adapters.json` in the config directory,
so they survive restarts; only the router process writes it. `check_adapter` reads the
GGUF headers of the adapter and of its base model's file and refuses, naming the
problem, a file that is not a LoRA adapter or whose architecture or tensor shapes do not
fit the base: a wrong base model is a 400 at registration, not a failure on the first
request.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from juggler.config import juggler_home
from juggler.errors import BadRequest, NotFound
from juggler.registry.json_cache import JsonCache
from juggler.registry.locks import edited_json

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class AdapterInfo:
    adapter_id: str
    path: str
    base_model: str


def model_adapter_id(model: str) -> str:
    """The id of the adapter a model made by Ollama's create runs with (its ADAPTER):
    requests for the model run with it (`router/core/adapters.Adapters.route`)."""
    slug = re.sub(r"[^A-Za-z0-9_.\-]", "_", model)
    return f"{slug}.adapter"[-128:].lstrip("_.-") or "model.adapter"


def check_id(adapter_id: str) -> None:
    if not _ID_RE.match(adapter_id):
        raise BadRequest(
            f"adapter ids are 1-128 letters, digits and _.- (starting with a letter or "
            f"digit), got {adapter_id!r}",
            param="adapter_id",
        )


def _fields(reader: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in reader.fields.items():
        with contextlib.suppress(Exception):  # arrays and odd types: not needed here
            out[name] = field.contents()
    return out


def check_adapter(adapter: Path, base: Path) -> None:
    """Raise BadRequest unless `adapter` is a GGUF LoRA adapter that fits the model in
    `base` (same architecture; every lora_a/lora_b pair shaped for a base tensor)."""
    import gguf  # a few ms to import; only registrations need it

    try:
        lora = gguf.GGUFReader(str(adapter))
    except (OSError, ValueError, IndexError) as exc:
        raise BadRequest(f"{adapter} is not a readable GGUF file: {exc}", param="path") from None
    meta = _fields(lora)
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise BadRequest(
            f"{adapter} is not a LoRA adapter (general.type={meta.get('general.type')!r}, "
            f"adapter.type={meta.get('adapter.type')!r})",
            param="path",
        )
    model = gguf.GGUFReader(str(base))
    arch, base_arch = meta.get("general.architecture"), _fields(model).get("general.architecture")
    if arch != base_arch:
        raise BadRequest(
            f"the adapter is for a {arch!r} model but the base model is {base_arch!r}",
            param="base_model",
        )
    shapes = {t.name: [int(n) for n in t.shape] for t in model.tensors}
    pairs: dict[str, dict[str, list[int]]] = {}
    for t in lora.tensors:
        stem, _, part = t.name.rpartition(".")
        if part in ("lora_a", "lora_b"):
            pairs.setdefault(stem, {})[part] = [int(n) for n in t.shape]
    if not pairs:
        raise BadRequest(f"{adapter} holds no lora_a/lora_b tensors", param="path")
    for stem, ab in sorted(pairs.items()):
        a, b, target = ab.get("lora_a"), ab.get("lora_b"), shapes.get(stem)
        if a is None or b is None or target is None:
            raise BadRequest(
                f"adapter tensor {stem} has no {'base tensor' if target is None else 'pair'} "
                "in the base model",
                param="base_model",
            )
        # ggml order: a is [n_in, rank], b is [rank, n_out], the base weight [n_in, n_out].
        if len(a) != 2 or len(b) != 2 or a[0] != target[0] or b[1] != target[1] or a[1] != b[0]:
            raise BadRequest(
                f"adapter tensor {stem} (a {a}, b {b}) does not fit the base model's {target}",
                param="base_model",
            )


class AdapterBook:
    """The registered adapters, read from the file on every call (a restart, or another
    router on the same home, sees the same set)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home
        self._cache = JsonCache()

    @property
    def file(self) -> Path:
        return (self.home or juggler_home()) / "adapters.json"

    def _entries(self) -> dict[str, Any]:
        return self._cache.read(self.file)  # every request asks (`Adapters.route`)

    def list(self) -> list[AdapterInfo]:
        return [AdapterInfo(**e) for _, e in sorted(self._entries().items())]

    def get(self, adapter_id: str) -> AdapterInfo | None:
        entry = self._entries().get(adapter_id)
        return AdapterInfo(**entry) if isinstance(entry, dict) else None

    def add(self, info: AdapterInfo) -> None:
        with edited_json(self.file) as entries:
            entries[info.adapter_id] = asdict(info)

    def remove(self, adapter_id: str) -> AdapterInfo:
        with edited_json(self.file) as entries:
            entry = entries.pop(adapter_id, None)
        if entry is None:
            raise NotFound(f"LoRA adapter {adapter_id!r} is not registered", param="adapter_id")
        return AdapterInfo(**entry)
