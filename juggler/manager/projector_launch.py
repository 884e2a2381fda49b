"""A vision projector in a llama.cpp backend's launch (issue 51): its flags, and its
file counted with the model's weights in the fit check and the footprint ("the
projector's memory is counted with the model")."""

from __future__ import annotations

import dataclasses

from juggler.registry.gguf_meta import GgufInfo
from juggler.registry.mmproj import ProjectorFile


def projector_argv(projector: ProjectorFile | None) -> list[str]:
    """`--mmproj PATH` (and `--mmproj-optional` for one found beside the model), braces
    escaped for the launch plan's per-token format()."""
    if projector is None:
        return []
    path = str(projector.path).replace("{", "{{").replace("}", "}}")
    return ["--mmproj", path, *(["--mmproj-optional"] if projector.optional else [])]


def with_projector(header: GgufInfo | None, projector: ProjectorFile | None) -> GgufInfo | None:
    """The model's header with the projector's bytes added to its size (the weights the
    footprint counts)."""
    if header is None or projector is None:
        return header
    try:
        extra = projector.path.stat().st_size
    except OSError:
        return header
    return dataclasses.replace(header, size_bytes=header.size_bytes + extra)
