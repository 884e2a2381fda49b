"""What a Modelfile adds to a model made by Ollama's `/api/create`: its SYSTEM, TEMPLATE,
PARAMETERs, MESSAGEs, ADAPTER and LICENSE (`ModelDefaults`), kept per model name in
`modelfiles.json` in the config directory (`ModelfileBook`; only the router writes it),
so they survive restarts as the registered model does. `/api/copy` copies them, a delete
forgets them (any face's delete: `forget`), a model created `from` one inherits them.
In core because a delete through Lemonade's routes forgets them too; Ollama's face
applies them (`ollama/applied`).

The ADAPTER is a registered LoRA adapter (seed 004's `AdapterBook`) under an id made
from the model's name (`registry.adapters.model_adapter_id`), with the created model as
its base: requests for the model run with it on every route (`core/adapters.route`),
and a backend opens only a registered adapter's file (`engine/adapter_paths`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from juggler.config import juggler_home
from juggler.errors import NotFound
from juggler.registry.adapters import model_adapter_id
from juggler.registry.json_cache import JsonCache
from juggler.registry.locks import edited_json

if TYPE_CHECKING:
    from juggler.router.core.deps import RouterState

#: Ollama parameters that are load options (kept as the model's saved load options too).
LOAD_PARAMS = frozenset({"num_ctx", "num_batch", "num_thread", "num_gpu"})
#: Ollama's sampling options (and PARAMETERs) as OpenAI body fields.
OPENAI_SAMPLING = {
    "num_predict": "max_tokens",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "seed",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop": "stop",
}


@dataclass(frozen=True)
class ModelDefaults:
    system: str = ""
    template: str = ""
    #: Ollama's parameter names and types (`stop` a list).
    parameters: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)
    #: The LoRA adapter's file ("" for none).
    adapter: str = ""
    license: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return self == ModelDefaults()

    def sampling(self) -> dict[str, Any]:
        """The parameters a request's `options` override (the load ones are the model's
        saved load options, applied at every load)."""
        return {k: v for k, v in self.parameters.items() if k not in LOAD_PARAMS}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v}

    @classmethod
    def from_json(cls, data: Any) -> ModelDefaults:
        if not isinstance(data, dict):
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: copy.deepcopy(v) for k, v in data.items() if k in names})


#: Every Ollama chat and generate request asks the book (one per process: `book_of` makes
#: a book per request).
_CACHE = JsonCache()


class ModelfileBook:
    """Reads the file on every call (a restart sees the same models)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home

    @property
    def file(self) -> Path:
        return (self.home or juggler_home()) / "modelfiles.json"

    def get(self, name: str) -> ModelDefaults:
        """`name`'s defaults (empty ones for a model with none)."""
        return ModelDefaults.from_json(_CACHE.read(self.file).get(name))

    def put(self, name: str, defaults: ModelDefaults) -> None:
        """Replace `name`'s defaults (none: forget them)."""
        with edited_json(self.file) as entries:
            if defaults.is_empty():
                entries.pop(name, None)
            else:
                entries[name] = defaults.to_json()

    def drop(self, name: str) -> None:
        self.put(name, ModelDefaults())


def book_of(state: RouterState) -> ModelfileBook:
    return ModelfileBook(state.registry.home)


async def set_adapter(state: RouterState, model: str, path: str, *, is_admin: bool) -> None:
    """Register (or replace, or with "" remove) the adapter `model` runs with."""
    aid = model_adapter_id(model)
    existing = state.adapters.book.get(aid)
    if existing is not None and (existing.path != path or existing.base_model != model):
        await state.adapters.unregister(aid, state.manager, state.proxy.client)
    if path:
        await state.adapters.register(aid, path, model, is_admin=is_admin)


async def forget(state: RouterState, model: str) -> None:
    """A deleted model's defaults and adapter."""
    book_of(state).drop(model)
    with contextlib.suppress(NotFound):
        await state.adapters.unregister(model_adapter_id(model), state.manager, state.proxy.client)
