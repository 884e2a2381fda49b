"""Vocabulary shared by every layer: model types, devices and model descriptions.

Seed 000/001: a model's type comes from its labels; a recipe decides its devices.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ModelType(enum.StrEnum):
    """The residency class of a model; each type has its own LRU slots (seed 001)."""

    LLM = "llm"
    EMBEDDING = "embedding"
    RERANKING = "reranking"
    AUDIO = "audio"
    IMAGE = "image"

    @classmethod
    def from_labels(cls, labels: tuple[str, ...] | list[str]) -> ModelType:
        """`embedding`/`embeddings` -> embedding, `reranking` -> reranking,
        `audio`/`transcription` -> audio, `image` -> image, anything else -> llm."""
        found = {label.lower() for label in labels}
        if found & {"embedding", "embeddings"}:
            return cls.EMBEDDING
        if "reranking" in found:
            return cls.RERANKING
        if found & {"audio", "transcription"}:
            return cls.AUDIO
        if "image" in found:
            return cls.IMAGE
        return cls.LLM


#: The order of `--max-loaded-models` list values (seed 000 extended to five types).
MODEL_TYPE_ORDER: tuple[ModelType, ...] = (
    ModelType.LLM,
    ModelType.EMBEDDING,
    ModelType.RERANKING,
    ModelType.AUDIO,
    ModelType.IMAGE,
)


class Device(enum.Flag):
    """Where a WrappedServer runs; a bitmask so that `server.device & Device.NPU` reads."""

    NONE = 0
    CPU = enum.auto()
    GPU = enum.auto()
    NPU = enum.auto()

    def names(self) -> list[str]:
        """Lower-case member names, e.g. ["gpu", "npu"]."""
        return [m.name.lower() for m in Device if m.name and m in self and m is not Device.NONE]

    def label(self) -> str:
        """Lemonade's string form: "gpu", "gpu|npu", "cpu"."""
        return "|".join(self.names()) or "none"

    @classmethod
    def parse(cls, text: str) -> Device:
        """Parse "gpu|npu" / "cpu" into flags; raises ValueError naming the bad part."""
        out = cls.NONE
        for part in text.replace(",", "|").split("|"):
            part = part.strip().upper()
            if not part:
                continue
            if part not in cls.__members__ or part == "NONE":
                raise ValueError(f"unknown device {part.lower()!r}; use cpu, gpu or npu")
            out |= cls[part]
        return out


@dataclass(frozen=True)
class ModelInfo:
    """One catalog or user model. `checkpoint` is unresolved (see registry.checkpoint)."""

    name: str
    checkpoint: str
    recipe: str = "llamacpp"
    labels: tuple[str, ...] = ()
    size_gb: float | None = None
    suggested: bool = True
    #: The longest context the model was trained for (tokens), when known.
    max_context_window: int | None = None
    #: For the `command` recipe: the launch template, health path and device.
    command: str | None = None
    health_path: str = "/health"
    device: str | None = None
    #: The vision projector (mmproj GGUF) loaded with the model: a path, or a file name
    #: beside the model's file (issue 51). None: an `mmproj*.gguf` beside it, if any.
    mmproj: str | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def type(self) -> ModelType:
        return ModelType.from_labels(self.labels)
