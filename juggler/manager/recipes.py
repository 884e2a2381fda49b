"""Recipes: recipe -> devices, NPU backend and how to launch a backend process.

Seed 000/001/002 device table (`Device` flags):

    recipe        devices    NPU backend     launched as
    llamacpp      gpu (*)    -               python -m juggler.engine ...
    command       declared   declared (**)   the model's own command template
    flm           npu        flm             flm serve {checkpoint} --port {port}
    ryzenai-llm   npu        ryzenai-llm     ryzenai-server -m {model_path} --port {port}
    whispercpp    npu        whispercpp      whisper-server -m {model_path} --port {port}
    oga-hybrid    gpu|npu    oga             ryzenai-server -m {model_path} --port {port}
    oga-npu       npu        oga             ryzenai-server ...
    oga-cpu       cpu        -               ryzenai-server ...

(*) the issue: "for `llamacpp` report the device actually used (cpu where nothing is
offloaded)"; before the backend answers we assume cpu for the cpu backend, gpu otherwise,
and then take the `device` its `/health` reports.
(**) a `command` model whose declared device includes npu holds the whole NPU (backend
`exclusive`) unless `ModelInfo.extra["npu_backend"]` names one of the vendor backends, in
which case it follows that backend's co-residency rules (useful to run a vendor server
under a custom command line).

Vendor presets look for their executable on PATH and raise RecipeNotInstalled (a
missing-file error: 404, evicts nothing) when it is absent. Everything here runs in the
caller's task before a load is queued; nothing here starts a process.
"""

from __future__ import annotations

import enum
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from juggler.config import Settings
from juggler.errors import BadRequest, CheckpointMissing, Forbidden, RecipeNotInstalled
from juggler.manager import auto_ctx
from juggler.manager.auto_ctx import header_of
from juggler.manager.fit import available_memory_bytes
from juggler.manager.llamacpp import GpuView, explicit_threads, llamacpp_argv, place
from juggler.manager.offload import Offload
from juggler.manager.projector_launch import projector_argv, with_projector
from juggler.options import AUTO_CTX, LaunchKey, ModelOptions
from juggler.registry.mmproj import projector_for
from juggler.types import Device, ModelInfo, ModelType

#: Turns a model's checkpoint into a file on disk; raises CheckpointMissing.
Resolver = Callable[[ModelInfo], Path]


class NpuBackend(enum.StrEnum):
    """Who holds the NPU. Different backends are mutually exclusive (seed 002)."""

    FLM = "flm"
    RYZENAI_LLM = "ryzenai-llm"
    WHISPERCPP = "whispercpp"
    OGA = "oga"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True)
class Recipe:
    name: str
    device: Device
    npu_backend: NpuBackend | None = None
    #: Vendor presets: executables to look for on PATH, first found wins.
    executables: tuple[str, ...] = ()
    #: Vendor presets: argv template after the executable; {model_path} {port} {host}.
    template: str = ""
    health_path: str = "/health"
    #: Whether the checkpoint names a file that must exist (flm takes a model tag).
    needs_file: bool = True


_ORT = "-m {model_path} --host {host} --port {port}"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("llamacpp", Device.GPU),
        Recipe("command", Device.GPU),
        Recipe(
            "flm",
            Device.NPU,
            NpuBackend.FLM,
            ("flm",),
            "serve {model_path} --port {port}",
            "/api/tags",
            needs_file=False,
        ),
        Recipe(
            "ryzenai-llm",
            Device.NPU,
            NpuBackend.RYZENAI_LLM,
            ("ryzenai-server",),
            _ORT,
            "/v1/models",
        ),
        Recipe(
            "whispercpp",
            Device.NPU,
            NpuBackend.WHISPERCPP,
            ("whisper-server", "whisper-cpp-server"),
            _ORT,
            "/",
        ),
        Recipe(
            "oga-hybrid",
            Device.GPU | Device.NPU,
            NpuBackend.OGA,
            ("ryzenai-server",),
            _ORT,
            "/v1/models",
        ),
        Recipe("oga-npu", Device.NPU, NpuBackend.OGA, ("ryzenai-server",), _ORT, "/v1/models"),
        Recipe("oga-cpu", Device.CPU, None, ("ryzenai-server",), _ORT, "/v1/models"),
    )
}


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one backend; built before the load is queued so that
    a missing file or executable fails at once and evicts nothing."""

    info: ModelInfo
    model_path: str
    recipe: Recipe
    device: Device
    npu_backend: NpuBackend | None
    options: ModelOptions
    health_path: str
    argv_template: tuple[str, ...]
    #: llamacpp backends report the device they actually use on /health.
    reports_device: bool
    #: Threads per engine worker given explicitly (`threads`, `--threads`); 0: the compute
    #: plan decides (llamacpp only).
    threads: int = 0
    #: Loaded with `ctx_size: -1`: `options.ctx_size` is the size chosen (`auto_ctx`).
    ctx_auto: bool = False
    #: llamacpp on a GPU: the layers offloaded and the VRAM they are estimated to take.
    offload: Offload | None = None

    @property
    def vram_bytes(self) -> int:
        """The VRAM this load is estimated to need (0: none)."""
        return self.offload.vram_bytes if self.offload is not None else 0

    @property
    def model_type(self) -> ModelType:
        return self.info.type

    def launch_key(self) -> LaunchKey:
        """`ModelOptions.launch_key`, with an automatic size as -1: the process holds the
        size chosen when it started, and asking for automatic sizing again is the same
        load (Lemonade's router: "Asking for auto again asks for what is running")."""
        key = self.options.launch_key()
        return (AUTO_CTX, *key[1:]) if self.ctx_auto else key

    def argv(self, port: int, host: str = "127.0.0.1") -> list[str]:
        """The command line for `port`; placeholders are filled per token, so a path with
        spaces stays one argument."""
        values = {
            "port": str(port),
            "host": host,
            "model_path": self.model_path,
            "model_name": self.info.name,
            "checkpoint": self.info.checkpoint,
        }
        return _fill(self.argv_template, values)


#: The placeholders of a launch template.
PLACEHOLDERS = ("port", "host", "model_path", "model_name", "checkpoint")


def _fill(template: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [token.format_map(values) for token in template]


def recipe_for(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        known = ", ".join(sorted(RECIPES))
        raise RecipeNotInstalled(f"Unknown recipe {name!r}; known recipes: {known}") from None


def _declared_device(info: ModelInfo) -> Device:
    if not info.device:
        return Device.GPU
    try:
        return Device.parse(info.device)
    except ValueError as exc:
        raise RecipeNotInstalled(f"model {info.name!r}: {exc}") from None


def _command_npu_backend(info: ModelInfo, device: Device) -> NpuBackend | None:
    if not device & Device.NPU:
        return None
    named = info.extra.get("npu_backend", "")
    try:
        return NpuBackend(named)
    except ValueError:
        return NpuBackend.EXCLUSIVE


def _command_template(info: ModelInfo) -> tuple[str, ...]:
    """The model's command template as argv tokens; a template that cannot be parsed or
    filled (unclosed quote, unknown placeholder) is the client's error, named `command`."""
    assert info.command is not None
    try:
        template = tuple(shlex.split(info.command))
        _fill(template, dict.fromkeys(PLACEHOLDERS, ""))
    except (ValueError, KeyError, IndexError) as exc:
        raise BadRequest(
            f"command: cannot parse the command template of {info.name!r}: {exc!r}",
            param="command",
        ) from None
    return template


def plan_launch(
    info: ModelInfo,
    options: ModelOptions,
    settings: Settings,
    resolve: Resolver,
    *,
    memory_bytes: int | None = None,
    gpu: GpuView | None = None,
) -> LaunchPlan:
    """Check the recipe is installed, the checkpoint is on disk and a llama.cpp load can
    fit (`fit`: in `memory_bytes`, the host memory this load can have; the memory
    available now when None; `gpu`: the GPUs it may use, none when None: `llamacpp`),
    and build the plan. An automatic `ctx_size` (-1) is sized
    here (`auto_ctx`), from the same header and memory.

    Blocks on file-system checks only (run it off the event loop if `resolve` is slow).
    Raises RecipeNotInstalled or CheckpointMissing (both missing-file class), or
    BadRequest for a `command` template that cannot be parsed or a load that cannot fit."""
    if memory_bytes is None:
        memory_bytes = available_memory_bytes()
    recipe = recipe_for(info.recipe)
    if recipe.name == "command":
        if not settings.allow_command_recipes:
            raise Forbidden(
                f"model {info.name!r} uses the command recipe, which is disabled; the admin "
                "can enable it with allow_command_recipes in the config file",
                param="model",
            )
        if not info.command:
            raise RecipeNotInstalled(
                f"model {info.name!r} uses recipe 'command' but has no command"
            )
        device = _declared_device(info)
        npu_backend = _command_npu_backend(info, device)
        template = _command_template(info)
        exe = template[0] if template else ""
        if not (shutil.which(exe) or Path(exe).is_file()):
            raise RecipeNotInstalled(f"model {info.name!r}: executable {exe!r} not found")
        model_path = str(resolve(info)) if info.checkpoint else ""
        return LaunchPlan(
            info,
            model_path,
            recipe,
            device,
            npu_backend,
            auto_ctx.resolved(options, header_of(model_path), settings, memory_bytes=None),
            info.health_path or "/health",
            template,
            reports_device=False,
            ctx_auto=options.ctx_size == AUTO_CTX,
        )
    if recipe.name == "llamacpp":
        model_path = str(resolve(info))
        projector = projector_for(info, model_path)
        header = with_projector(header_of(model_path), projector)
        placed = place(
            info, options, settings, header, memory_bytes=memory_bytes, gpu=gpu or GpuView()
        )
        return LaunchPlan(
            info,
            model_path,
            recipe,
            placed.device,
            None,
            placed.options,
            "/health",
            tuple(llamacpp_argv(info, placed.flags) + projector_argv(projector)),
            reports_device=True,
            threads=explicit_threads(options, settings),
            ctx_auto=options.ctx_size == AUTO_CTX,
            offload=placed.offload,
        )
    found = next((p for p in map(shutil.which, recipe.executables) if p), None)
    if found is None:
        names = " or ".join(repr(e) for e in recipe.executables)
        raise RecipeNotInstalled(
            f"Recipe {recipe.name!r} is not installed: {names} not found on PATH"
        )
    model_path = str(resolve(info)) if recipe.needs_file else info.checkpoint
    template = (found, *shlex.split(recipe.template))
    header = header_of(model_path) if recipe.needs_file else None
    return LaunchPlan(
        info,
        model_path,
        recipe,
        recipe.device,
        recipe.npu_backend,
        auto_ctx.resolved(options, header, settings, memory_bytes=None),
        recipe.health_path,
        template,
        reports_device=False,
        ctx_auto=options.ctx_size == AUTO_CTX,
    )


def require_file(plan: LaunchPlan) -> None:
    """Re-check just before spawning: a file that vanished is still a missing file."""
    if plan.recipe.needs_file and plan.model_path and not Path(plan.model_path).exists():
        raise CheckpointMissing(f"Checkpoint file not found: {plan.model_path}")
