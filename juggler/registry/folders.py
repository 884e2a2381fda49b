"""The GGUFs in the admin's model folders, as models (issue 49, part 3).

Issue 49: "Every `.gguf` under the configured model folders is listed ... and loads on
first use, without a pull: named after its file (Ollama-style `name:tag` too), split
files (`-00001-of-00003.gguf`) as one model, `mmproj` files recognised and not listed as
models, its type (llm or embedding) from the GGUF header. New files appear without a
restart." The folders are `model_dirs` (Lemonade's `extra_models_dir`), set by the admin
in the config file, the environment or `/internal/set`; nothing else is scanned.

The rules, after Lemonade's extra-models spec:
- every `*.gguf` below a folder, at most `MAX_DEPTH` folders down and `MAX_ENTRIES`
  entries in all (a guard against a folder set to `/`); a file or folder that cannot be
  read is skipped, as is a link that leads outside the configured folders;
- `extra.<file name without .gguf>` is its name (Lemonade's namespace for found models,
  which Juggler reserves), and `<name>:<tag>` its Ollama name: the tag is the file's
  quantization suffix (`Qwen3-8B-Q4_K_M.gguf` -> `Qwen3-8B:Q4_K_M`), else `latest`; the
  bare file name names it too, when no other model has that name;
- a split model (`NAME-00001-of-00003.gguf` ...) is one model named NAME, loaded from its
  first part (llama.cpp reads the others beside it), listed only when every part is there;
- a file with `mmproj` in its name is a vision projector, not a model: not listed (and
  not loaded: Juggler serves no images);
- a file whose header is not GGUF is not a model; the header gives the type (rank
  pooling: reranking; an encoder or another pooling: embeddings; else a chat model) and
  the trained context; the labels are those and `custom`;
- two files with the same name: the first in path order keeps it, the next is named
  after its folder too (`extra.<folder>-<name>`).

`group` is pure; `find_ggufs` and `scan` read the disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from juggler.registry.gguf_meta import GgufError, labels_of, read_info
from juggler.types import ModelInfo

PREFIX = "extra."
#: `ModelInfo.extra["source"]` of a found model.
SOURCE = "model_dirs"
MAX_DEPTH = 8
MAX_ENTRIES = 100_000
_SHARD = re.compile(r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT = re.compile(
    r"^(?P<name>.+?)[-._](?P<tag>(?:[IU]?Q\d(?:_[A-Z0-9]+)*|T?Q\d_\d|BF16|F16|F32|MXFP4(?:_[A-Z0-9]+)*))$",
    re.IGNORECASE,
)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class Candidate:
    """One model made of files in a folder: `files[0]` is what llama.cpp opens."""

    name: str
    ollama_name: str
    stem: str
    files: tuple[Path, ...]


def ollama_name(stem: str) -> str:
    """`Qwen3-8B-Q4_K_M` -> `Qwen3-8B:Q4_K_M`; without a quantization suffix, `:latest`."""
    match = _QUANT.match(stem)
    if match is None:
        return f"{stem}:latest"
    return f"{match['name']}:{match['tag']}"


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-.") or "model"


def group(files: Iterable[Path]) -> list[Candidate]:
    """The models `files` (sorted `.gguf` paths) make (see the module doc). Pure."""
    singles: list[tuple[str, tuple[Path, ...]]] = []
    shards: dict[tuple[Path, str, str], dict[int, Path]] = {}
    for path in sorted(files):
        if "mmproj" in path.name.lower():
            continue
        shard = _SHARD.match(path.name)
        if shard is None:
            singles.append((path.name[: -len(".gguf")], (path,)))
            continue
        key = (path.parent, shard["base"], shard["count"])
        shards.setdefault(key, {})[int(shard["index"])] = path
    for (_, base, count), parts in shards.items():
        if sorted(parts) == list(range(1, int(count) + 1)):  # every part is there
            singles.append((base, tuple(parts[i] for i in sorted(parts))))
    singles.sort(key=lambda item: item[1][0])
    out: list[Candidate] = []
    taken: set[str] = set()
    for stem, paths in singles:
        name = _safe(stem)
        if name.lower() in taken:
            name = f"{_safe(paths[0].parent.name)}-{name}"
        n = 2
        while name.lower() in taken:
            name, n = f"{_safe(stem)}-{n}", n + 1
        taken.add(name.lower())
        out.append(Candidate(PREFIX + name, ollama_name(name), name, paths))
    return out


def find_ggufs(folders: Sequence[str | Path]) -> list[Path]:
    """The `.gguf` files below `folders` (see the module doc for the limits)."""
    roots = []
    for folder in folders:
        try:
            roots.append(Path(folder).expanduser().resolve())
        except (OSError, RuntimeError):
            continue
    found: list[Path] = []
    entries = 0
    for root in sorted(set(roots)):
        stack = [(root, 0)]
        while stack and entries < MAX_ENTRIES:
            folder, depth = stack.pop()
            try:
                with os.scandir(folder) as it:
                    listing = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for entry in listing:
                entries += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH:
                            stack.append((Path(entry.path), depth + 1))
                    elif entry.name.lower().endswith(".gguf") and entry.is_file():
                        path = Path(entry.path)
                        real = path.resolve()
                        if any(real.is_relative_to(r) for r in roots):
                            found.append(path)
                except OSError:
                    continue
    return found


def scan(folders: Sequence[str | Path]) -> list[ModelInfo]:
    """The models in `folders`, as catalog entries (`checkpoint`: the file's path)."""
    out = []
    for c in group(find_ggufs(folders)):
        try:
            header = read_info(c.files[0])
            size = sum(p.stat().st_size for p in c.files)
        except (GgufError, OSError):
            continue  # not a GGUF (or gone): not a model
        out.append(
            ModelInfo(
                name=c.name,
                checkpoint=str(c.files[0]),
                labels=(*labels_of(header), "custom"),
                size_gb=round(size / 1e9, 3),
                max_context_window=header.context_length,
                extra={
                    "source": SOURCE,
                    "ollama_name": c.ollama_name,
                    "stem": c.stem,
                    "size_bytes": str(size),
                    "parts": str(len(c.files)),
                },
            )
        )
    return out


def is_found(info: ModelInfo) -> bool:
    """A model found in the model folders (not registered)."""
    return info.extra.get("source") == SOURCE
