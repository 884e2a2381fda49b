"""Issue 48: "Lemonade's and Ollama's options map onto them [ctx_size and kv_cells] as
their docs define". Ollama's FAQ: "Required RAM will scale by OLLAMA_NUM_PARALLEL *
OLLAMA_CONTEXT_LENGTH": each parallel request may hold `num_ctx` tokens. Pure: the
manager is a stand-in that records the loads asked of it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from juggler.config import Settings
from juggler.errors import BadRequest
from juggler.options import MAX_KV_CELLS
from juggler.router.ollama.residency import ensure_options, ollama_kv_cells
from juggler.types import ModelType


def test_num_ctx_gives_each_parallel_sequence_its_context() -> None:
    assert ollama_kv_cells(2048, 8) == 16384
    assert ollama_kv_cells(2048, 1) == 0, "one sequence: its cells are its context"
    assert ollama_kv_cells(-1, 8) == 0, "automatic sizing keeps ctx_size's cells"
    assert ollama_kv_cells(1 << 20, 64) == MAX_KV_CELLS


class Loads:
    """A manager that records each load and refuses kv_cells above `most_cells`."""

    def __init__(self, settings: Settings, most_cells: int) -> None:
        self.settings = settings
        self.most_cells = most_cells
        self.asked: list[dict[str, Any]] = []

    def snapshot(self) -> list[Any]:
        return []

    async def load(self, model: str, options: dict[str, Any]) -> str:
        self.asked.append(dict(options))
        if options.get("kv_cells", 0) > self.most_cells:
            raise BadRequest("too many KV cells for the memory", param="kv_cells")
        return model


def state(most_cells: int = MAX_KV_CELLS, model_type: ModelType = ModelType.LLM, **s: Any) -> Any:
    manager = Loads(Settings(model="", **s), most_cells)
    registry = SimpleNamespace(lookup=lambda name: SimpleNamespace(name=name, type=model_type))
    pins = SimpleNamespace(saved_options=lambda name: {})
    return SimpleNamespace(manager=manager, registry=registry, pins=pins)


def test_ollamas_num_ctx_is_ctx_size_with_cells_for_every_sequence() -> None:
    st = state(parallel=8)
    asyncio.run(ensure_options(st, "m", {"ctx_size": 2048}))
    assert st.manager.asked == [{"ctx_size": 2048, "kv_cells": 16384}]
    args = state(parallel=8)
    asyncio.run(ensure_options(args, "m", {"ctx_size": 1024, "llamacpp_args": "--parallel 4"}))
    assert args.manager.asked[0]["kv_cells"] == 4096, "a worker's sequences as launched"
    embed = state(parallel=8, model_type=ModelType.EMBEDDING)
    asyncio.run(ensure_options(embed, "e", {"ctx_size": 512}))
    assert embed.manager.asked == [{"ctx_size": 512}], "an embedding model has no sequences"


def test_cells_that_do_not_fit_fall_back_to_sharing_the_context() -> None:
    """As Ollama runs one request at a time when its parallel load does not fit: the
    worker's sequences then share `num_ctx` cells (kv_cells 0)."""
    st = state(most_cells=10000, parallel=8)
    asyncio.run(ensure_options(st, "m", {"ctx_size": 2048}))
    assert [a["kv_cells"] for a in st.manager.asked] == [16384, 0]
    never = state(most_cells=-1, parallel=8)
    with pytest.raises(BadRequest):
        asyncio.run(ensure_options(never, "m", {"ctx_size": 2048}))
