"""Per-load options and their priority order.

Seed 000: "The priority order for defaults is now: 1. Values explicity passed in `load`
when loading a WrappedServer. 2. Values set by the user as `lemonade-server` CLI args or
env vars. 3. Default hardcoded values in `lemonade-router`."

`LoadOptions` is what the router builds from a `/load` body (every field optional);
`LoadOptions.resolve(settings)` merges it over `Settings` (which already holds CLI > env >
config file > defaults) into a complete `ResolvedOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from juggler.config import Settings
from juggler.errors import BadRequest

_BACKENDS = frozenset({"cpu", "vulkan", "rocm", "metal", "cuda"})


@dataclass(frozen=True)
class ResolvedOptions:
    """Every option of one WrappedServer, after the priority merge."""

    pinned: bool
    ctx_size: int
    llamacpp_backend: str
    llamacpp_args: str
    auto_evict: bool
    downsize_idle_timeout: float
    evict_idle_timeout: float
    evict_weight_factor: float

    def launch_key(self) -> tuple[int, str, str]:
        """The options that change how the backend process is started. Two loads of one
        model with the same key are the same load (no-op); a different key reloads."""
        return (self.ctx_size, self.llamacpp_backend, self.llamacpp_args)

    def recipe_options(self) -> dict[str, Any]:
        """Lemonade's `recipe_options` object for health entries."""
        return {
            "ctx_size": self.ctx_size,
            "llamacpp_backend": self.llamacpp_backend,
            "llamacpp_args": self.llamacpp_args,
            "auto_evict": self.auto_evict,
            "downsize_idle_timeout": self.downsize_idle_timeout,
            "evict_idle_timeout": self.evict_idle_timeout,
            "evict_weight_factor": self.evict_weight_factor,
        }


@dataclass(frozen=True)
class LoadOptions:
    """Options passed explicitly to `/load`; `None` means "not given, use the setting"."""

    pinned: bool | None = None
    ctx_size: int | None = None
    llamacpp_backend: str | None = None
    llamacpp_args: str | None = None
    auto_evict: bool | None = None
    downsize_idle_timeout: float | None = None
    evict_idle_timeout: float | None = None
    evict_weight_factor: float | None = None

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> LoadOptions:
        """Pick the known option keys out of a `/load` JSON body (other keys such as
        `model_name` are ignored) and validate them; a bad value raises BadRequest
        naming the field."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in body.items() if k in known and v is not None}
        options = cls(**values)
        options.validate()
        return options

    def validate(self) -> None:
        """Raise BadRequest (param = field name) for an out-of-range value."""
        if self.pinned is not None and not isinstance(self.pinned, bool):
            raise BadRequest("pinned must be true or false", param="pinned")
        if self.ctx_size is not None and (
            isinstance(self.ctx_size, bool)
            or not isinstance(self.ctx_size, int)
            or self.ctx_size < 64
        ):
            raise BadRequest("ctx_size must be an integer >= 64", param="ctx_size")
        if self.llamacpp_backend is not None and self.llamacpp_backend not in _BACKENDS:
            raise BadRequest(
                f"llamacpp_backend must be one of {sorted(_BACKENDS)}", param="llamacpp_backend"
            )
        if self.llamacpp_args is not None and not isinstance(self.llamacpp_args, str):
            raise BadRequest("llamacpp_args must be a string", param="llamacpp_args")
        if self.auto_evict is not None and not isinstance(self.auto_evict, bool):
            raise BadRequest("auto_evict must be true or false", param="auto_evict")
        for name in ("downsize_idle_timeout", "evict_idle_timeout", "evict_weight_factor"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise BadRequest(f"{name} must be a number >= 0", param=name)
        if self.evict_weight_factor is not None and self.evict_weight_factor <= 0:
            raise BadRequest("evict_weight_factor must be > 0", param="evict_weight_factor")

    def resolve(self, settings: Settings) -> ResolvedOptions:
        """/load values > settings (CLI > env > config file) > built-in defaults."""

        def pick(name: str) -> Any:
            value = getattr(self, name)
            return getattr(settings, name) if value is None else value

        return ResolvedOptions(
            pinned=bool(self.pinned),
            ctx_size=int(pick("ctx_size")),
            llamacpp_backend=str(pick("llamacpp_backend")),
            llamacpp_args=str(pick("llamacpp_args")),
            auto_evict=bool(pick("auto_evict")),
            downsize_idle_timeout=float(pick("downsize_idle_timeout")),
            evict_idle_timeout=float(pick("evict_idle_timeout")),
            evict_weight_factor=float(pick("evict_weight_factor")),
        )
