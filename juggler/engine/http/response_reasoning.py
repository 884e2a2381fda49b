"""The Responses API's `reasoning` output item: a reasoning model's thinking, whole (a
`reasoning_text` content part; no summary), before the message or calls it led to, with
its stream events (`response.reasoning_text.delta` / `.done`). Pure."""

from __future__ import annotations

import uuid
from typing import Any, Protocol


class Items(Protocol):
    items: list[dict[str, Any]]

    def add(self, item: dict[str, Any]) -> list[dict[str, Any]]: ...


class ReasoningItem:
    """The response's one reasoning item, opened by its first thinking."""

    def __init__(self) -> None:
        self.index: int | None = None

    def feed(self, out: Items, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.index is None:
            item: dict[str, Any] = {
                "id": f"rs_{uuid.uuid4().hex}",
                "type": "reasoning",
                "status": "in_progress",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": ""}],
            }
            events += out.add(item)
            self.index = len(out.items) - 1
        item = out.items[self.index]
        item["content"][0]["text"] += text
        events.append(
            {
                "type": "response.reasoning_text.delta",
                "item_id": item["id"],
                "output_index": self.index,
                "content_index": 0,
                "delta": text,
            }
        )
        return events


def reasoning_done(item: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The events that close a reasoning item (before its `output_item.done`)."""
    return [
        {
            "type": "response.reasoning_text.done",
            "item_id": item["id"],
            "output_index": index,
            "content_index": 0,
            "text": item["content"][0]["text"],
        }
    ]
