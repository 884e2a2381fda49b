"""Which vision projector (mmproj GGUF) loads with a model (issue 51).

A model names its projector (`ModelInfo.mmproj`: a path, or a file name beside the
model's file, as Lemonade's pull and llama-server's `--mmproj` do), or has one beside
its file: an `mmproj*.gguf` in the model file's folder (a Hugging Face repository's
download folder holds one repository's files). A named projector that is missing fails
the load; one found beside the file is optional (the backend loads the model without
it, and says so, when llama.cpp refuses it for this model).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from juggler.errors import CheckpointMissing
from juggler.registry.checkpoint import local_file
from juggler.types import ModelInfo

#: The label (Lemonade's) and capability (Ollama's) of a model that takes images.
VISION = "vision"


@dataclass(frozen=True)
class ProjectorFile:
    path: Path
    #: Found beside the model rather than named by it: a load goes on without it.
    optional: bool


def projector_for(info: ModelInfo, model_path: Path | str | None) -> ProjectorFile | None:
    """The projector that loads with `info` whose file is `model_path`; raises
    CheckpointMissing when the model names one that is not there."""
    folder = Path(model_path).parent if model_path else None
    if info.mmproj:
        named = Path(info.mmproj).expanduser()
        if not named.is_absolute() and folder is not None:
            named = folder / named.name
        if not named.is_file():
            raise CheckpointMissing(f"the projector {info.mmproj!r} of {info.name!r} is not there")
        return ProjectorFile(named, optional=False)
    if folder is None or not str(model_path) or not folder.is_dir():
        return None
    found = sorted(folder.glob("mmproj*.gguf"))
    return ProjectorFile(found[0], optional=True) if found else None


def takes_images(info: ModelInfo) -> bool:
    """Whether the model takes images: labelled `vision`, naming a projector, or with
    one beside its file on disk now. Reads the file system (no download)."""
    if VISION in info.labels or info.mmproj:
        return True
    if info.recipe != "llamacpp" or not info.checkpoint:
        return False
    try:
        return projector_for(info, local_file(info)) is not None
    except CheckpointMissing:
        return False


def labels_of(info: ModelInfo) -> tuple[str, ...]:
    """The model's labels, with `vision` when it takes images."""
    if VISION in info.labels or not takes_images(info):
        return info.labels
    return (*info.labels, VISION)
