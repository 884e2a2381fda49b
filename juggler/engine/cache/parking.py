"""Cached prefixes parked outside the KV cache, restored when a request shares them.

With a unified KV cache every decode attends over all occupied cells, so a finished
conversation's cached prefix slows every other stream on its worker for as long as it
sits in the cache (a lone stream: about 10% with 1,000 such cells on SmolLM2). A worker
that has been idle therefore *parks* its cached sequences: it copies each one's KV out
(`llama_state_seq_get_data`, about 25 MB and a few ms for 1,100 SmolLM2 tokens) and
frees its cells. A later stateless request whose prompt shares a longer prefix with a
parked sequence than with anything still in the cache gets it copied back in
(`llama_state_seq_set_data`) and continues from there, instead of prefilling it again.

The store is owned by one worker thread. It is bounded in cells (`max_cells`, the
tokens its entries hold); the least recently used entries go first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from juggler.engine.cache.prefix_cache import (
    MAX_RESTORE_RATIO,
    MIN_USEFUL_REUSE,
    common_prefix_len,
    worth_reusing,
)
from juggler.engine.schedule.messages import AdapterRef


@dataclass(eq=False)
class Parked:
    tokens: tuple[int, ...]
    #: The sequence's KV as `Context.seq_state()` copied it.
    state: Any
    last_used: int
    #: The LoRA adapter its KV was made with (only prompts run with it may reuse it).
    adapter: AdapterRef | None = None

    @property
    def adapter_id(self) -> str | None:
        return self.adapter.adapter_id if self.adapter is not None else None


class ParkedStore:
    def __init__(self, max_cells: int) -> None:
        self.max_cells = max_cells
        self.entries: list[Parked] = []

    @property
    def cells(self) -> int:
        return sum(len(p.tokens) for p in self.entries)

    def add(self, entry: Parked) -> None:
        """Keep `entry`, dropping the least recently used entries beyond the budget."""
        if len(entry.tokens) > self.max_cells:
            return
        self.entries.append(entry)
        self.entries.sort(key=lambda p: p.last_used)
        while self.cells > self.max_cells:
            self.entries.pop(0)

    def best(
        self, prompt: Sequence[int], better_than: int, adapter: str | None = None
    ) -> tuple[Parked, int] | None:
        """The entry (made with `adapter`) sharing the longest prefix with `prompt`, if
        that prefix is longer than `better_than` (what the KV cache already offers) and
        worth a restore (`prefix_cache.worth_reusing`; a short one only from an entry not
        much longer than it, as a restore copies the whole entry)."""
        found: tuple[Parked, int] | None = None
        for p in self.entries:
            if p.adapter_id != adapter:
                continue
            n = common_prefix_len(p.tokens, prompt)
            if n <= better_than or (found is not None and n <= found[1]):
                continue
            if n >= MIN_USEFUL_REUSE or (
                worth_reusing(n, len(prompt)) and n * MAX_RESTORE_RATIO >= len(p.tokens)
            ):
                found = (p, n)
        return found

    def take(self, entry: Parked) -> None:
        self.entries.remove(entry)
