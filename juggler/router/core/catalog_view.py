"""How a catalog model looks to clients: Lemonade's model entry, and the file facts the
Lemonade and Ollama dialects both show (size, context window, GGUF details).

Read-only: looks at the registry entry and, when the model's file is on disk, at the
file's size and GGUF header (never downloads or assembles anything).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from juggler.reasoning import template_reasons
from juggler.registry.checkpoint import is_available, local_file
from juggler.registry.gguf_meta import GgufError, GgufInfo, read_info
from juggler.registry.mmproj import labels_of
from juggler.types import ModelInfo

STARTED = int(time.time())


@dataclass(frozen=True)
class FileFacts:
    """What the model's file on disk says (all None when it is not on disk)."""

    path: Path | None = None
    size_bytes: int | None = None
    modified_at: float | None = None
    gguf: GgufInfo | None = None

    @property
    def digest(self) -> str:
        """A stable identifier of this file version (Ollama's `digest` field)."""
        key = f"{self.path}:{self.size_bytes}:{self.modified_at}"
        return hashlib.sha256(key.encode()).hexdigest()


def file_facts(info: ModelInfo) -> FileFacts:
    path = local_file(info)
    if path is None:
        return FileFacts()
    try:
        stat = path.stat()
    except OSError:
        return FileFacts()
    meta: GgufInfo | None = None
    with contextlib.suppress(GgufError, OSError):
        meta = read_info(path)
    # A split model found in the model folders: the size of all its parts.
    size = int(info.extra.get("size_bytes", stat.st_size))
    return FileFacts(path, size, stat.st_mtime, meta)


def listed_labels(info: ModelInfo, facts: FileFacts) -> list[str]:
    """The model's labels (`vision` with a projector), `reasoning` too when its GGUF's
    chat template thinks (issue 49)."""
    labels = list(labels_of(info))
    template = facts.gguf.metadata.get("tokenizer.chat_template") if facts.gguf else None
    if "reasoning" not in labels and template_reasons(template):
        labels.append("reasoning")
    return labels


def max_context_window(info: ModelInfo, facts: FileFacts) -> int | None:
    if facts.gguf is not None and facts.gguf.context_length:
        return facts.gguf.context_length
    return info.max_context_window


def model_entry(
    info: ModelInfo,
    saved_options: dict[str, Any] | None = None,
    *,
    context_length: int | None = None,
    facts: FileFacts | None = None,
) -> dict[str, Any]:
    """One model in Lemonade's /models shape (a superset of OpenAI's); `context_length`
    when the caller knows it (openai.md: omitted when it is not known); `facts` when the
    caller has read them already."""
    facts = file_facts(info) if facts is None else facts
    size_gb = info.size_gb
    if facts.size_bytes is not None:
        size_gb = round(facts.size_bytes / 1e9, 3)
    entry: dict[str, Any] = {
        "id": info.name,
        "object": "model",
        "created": STARTED,
        "owned_by": "juggler",
        "checkpoint": info.checkpoint,
        "recipe": info.recipe,
        "labels": listed_labels(info, facts),
        "type": info.type.value,
        "downloaded": is_available(info),
        "suggested": info.suggested,
        "max_context_window": max_context_window(info, facts),
    }
    if size_gb is not None:
        entry["size"] = size_gb
    if context_length is not None:
        entry["context_length"] = context_length
    if saved_options:
        entry["recipe_options"] = dict(saved_options)
    return entry
