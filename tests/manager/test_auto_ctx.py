"""Lemonade's `ctx_size: -1` (issue 24; its suite's 012ld, 012r, 012t, 012u): "A
`ctx_size` of `-1` means the server picks the context size automatically". Juggler picks
the trained context, at most 32768, as far as half the memory allows (`auto_ctx`). Fast:
GGUF headers written by the `gguf` package, memory given, a fake spawner."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.errors import BadRequest
from juggler.manager import Manager, auto_ctx, fit
from juggler.manager.auto_ctx import AUTO_CTX_FALLBACK, AUTO_CTX_MAX, auto_ctx_size
from juggler.manager.footprint import kv_bytes_per_token
from juggler.manager.recipes import LaunchPlan, plan_launch
from juggler.options import EngineFlags
from juggler.registry.gguf_meta import read_info
from juggler.types import ModelInfo, ModelType

from .conftest import FakeRegistry, resolve_path, run, settings
from .fake_spawner import FakeSpawner
from .test_fit import smol_like

GIB = 1 << 30
PER_TOKEN = 23040  # SmolLM2's shape (test_fit.smol_like)


def test_the_size_is_the_trained_context_as_far_as_half_the_memory_allows(
    tmp_path: Path,
) -> None:
    header = read_info(smol_like(tmp_path / "m.gguf", ctx=8192))
    assert kv_bytes_per_token(header) == PER_TOKEN
    assert auto_ctx_size(header, workers=1, memory_bytes=24 * GIB) == 8192
    assert auto_ctx_size(header, workers=1, memory_bytes=None) == 8192  # offloaded
    # Half of 200 MiB, less the weights, holds about 4551 tokens of one worker's KV:
    small = 200 << 20
    fits = (small // 2 - header.size_bytes) // PER_TOKEN
    got = auto_ctx_size(header, workers=1, memory_bytes=small)
    assert got == fits // 256 * 256 == 4352
    assert auto_ctx_size(header, workers=2, memory_bytes=small) == (fits // 2) // 256 * 256
    assert auto_ctx_size(header, workers=1, memory_bytes=1 << 20) == 512  # the floor


def test_a_long_trained_context_is_capped_and_an_unknown_header_falls_back(
    tmp_path: Path,
) -> None:
    long = read_info(smol_like(tmp_path / "long.gguf", ctx=131072))
    assert auto_ctx_size(long, workers=1, memory_bytes=64 * GIB) == AUTO_CTX_MAX == 32768
    short = read_info(smol_like(tmp_path / "short.gguf", ctx=256))
    assert auto_ctx_size(short, workers=1, memory_bytes=1 << 20) == 256  # never past trained
    assert auto_ctx_size(None, workers=1, memory_bytes=None) == AUTO_CTX_FALLBACK == 4096


def test_the_plan_starts_the_backend_with_the_size_chosen(tmp_path: Path) -> None:
    """lemonade.md, `launch_command`: "a `ctx_size` of `auto` appears here as a real
    number"; the load stays automatic, so asking for -1 again is the same load."""
    info = ModelInfo(name="M", checkpoint=str(smol_like(tmp_path / "m.gguf", ctx=8192)))
    s = settings()

    def plan(ctx_size: int, memory_bytes: int) -> LaunchPlan:
        options = s.model_options({"ctx_size": ctx_size})
        return plan_launch(info, options, s, resolve_path, memory_bytes=memory_bytes)

    auto = plan(-1, 24 * GIB)
    assert auto.ctx_auto and auto.options.ctx_size == 8192
    argv = auto.argv(port=1)
    assert argv[argv.index("--ctx-size") + 1] == "8192"
    # Half of 300 MiB holds the weights and about 6826 tokens of KV, for every worker the
    # backend will run (automatic workers: issue 47); the other half is for the process
    # and the compute buffers, which the fit check counts as well.
    tight = plan(-1, 300 << 20)
    header = read_info(Path(info.checkpoint))
    workers = auto_ctx.workers_of(s.model_options({"ctx_size": -1}), s, header)
    expected = {1: 6656, 2: 3328}[workers]
    assert tight.options.ctx_size == expected and tight.launch_key() == auto.launch_key()
    tight_argv = tight.argv(port=1)
    assert tight_argv[tight_argv.index("--workers") + 1] == str(workers)
    given = plan(8192, 24 * GIB)
    assert not given.ctx_auto and given.launch_key() != auto.launch_key()
    assert given.launch_key() == given.options.launch_key()
    # The size chosen is what lemonade.md's `resolved_ctx_size` reports before a load.
    planned = auto_ctx.planned_size(
        info, s.model_options({"ctx_size": -1}), s, resolve_path, memory_bytes=24 * GIB
    )
    assert planned == 8192
    missing = ModelInfo(name="N", checkpoint=str(tmp_path / "not-downloaded.gguf"))
    assert auto_ctx.planned_size(missing, s.model_options({"ctx_size": -1}), s, resolve_path) == (
        AUTO_CTX_FALLBACK
    )


def test_loading_auto_again_keeps_the_process_and_its_size(tmp_path: Path) -> None:
    """Lemonade's suite, 012t: "the running process holds the concrete size auto-tune
    chose, which no request can spell, so -1 has to be recognized as the size it already
    resolved to"; 012ld: a load's -1 beats the saved size."""
    info = ModelInfo(name="M", checkpoint=str(smol_like(tmp_path / "m.gguf", ctx=8192)))
    fake = FakeSpawner()
    saved = {"M": {"ctx_size": 3072, "llamacpp_args": "--threads 1"}}

    async def scenario() -> None:
        m = Manager(
            settings(),
            FakeRegistry(info),
            resolve=resolve_path,
            spawner=fake,
            saved_options=lambda name: saved.get(name, {}),
        )
        await m.start()
        try:
            first = await m.load("M", {"ctx_size": -1})
            assert first.options.ctx_size == 8192 == first.to_health()["recipe_options"]["ctx_size"]
            assert "--threads 1" in first.options.llamacpp_args  # the saved args still count
            again = await m.load("M", {"ctx_size": -1, "evict_idle_timeout": 600})
            assert again.pid == first.pid and fake.starts("M") == 1
            assert again.options.ctx_size == 8192 and again.options.evict_idle_timeout == 600
            auto = settings().model_options({"ctx_size": -1})
            assert await m.resolved_ctx_size("M", auto) == 8192  # lemonade.md's resolved_ctx_size
            sized = await m.load("M")  # the saved 3072: another launch
            assert sized.options.ctx_size == 3072 and fake.starts("M") == 2
        finally:
            await m.stop()

    run(scenario())


def test_a_listed_context_length_is_never_the_automatic_sentinel(tmp_path: Path) -> None:
    """Issue 49 (Lemonade's test 006c): "with `ctx_size` automatic (-1), a model's
    `context_length` in `/models` is the resolved size (or the trained context before
    the first load), never absent or a sentinel"."""
    header = read_info(smol_like(tmp_path / "m.gguf", ctx=8192))
    s = settings()
    auto = s.model_options({"ctx_size": -1})
    small = 200 << 20
    shown = auto_ctx.listed_size(auto, header, 8192, s, memory_bytes=small)
    workers = auto_ctx.workers_of(auto, s, header)
    assert shown == auto_ctx_size(header, workers=workers, memory_bytes=small) >= 2048
    assert auto_ctx.listed_size(auto, None, 40960, s) == 40960  # not on disk: trained
    assert auto_ctx.listed_size(auto, None, None, s) == AUTO_CTX_FALLBACK
    fixed = s.model_options({"ctx_size": 2048})
    assert auto_ctx.listed_size(fixed, header, 8192, s) == 2048


def test_automatic_workers_are_one_where_two_would_not_fit(tmp_path: Path) -> None:
    """Issue 47: a small model runs two workers by default (`compute.workers`), but a
    machine that holds one worker's KV cache and not two's still loads it, with one."""
    info = ModelInfo(name="M", checkpoint=str(smol_like(tmp_path / "m.gguf", ctx=8192)))
    s = settings()
    options = s.model_options({"ctx_size": 8192})
    header = read_info(Path(info.checkpoint))
    if auto_ctx.workers_of(options, s, header) < 2:
        pytest.skip("one core: the automatic count is one anyway")
    one = fit.estimate(header, EngineFlags(ctx_size=8192, workers=1), ModelType.LLM).peak
    two = fit.estimate(header, EngineFlags(ctx_size=8192, workers=2), ModelType.LLM).peak
    roomy = plan_launch(info, options, s, resolve_path, memory_bytes=two + (1 << 20))
    tight = plan_launch(info, options, s, resolve_path, memory_bytes=(one + two) // 2)
    for plan, workers in ((roomy, "2"), (tight, "1")):
        argv = plan.argv(port=1)
        assert argv[argv.index("--workers") + 1] == workers
    explicit = s.model_options({"ctx_size": 8192, "llamacpp_args": "--workers 2"})
    with pytest.raises(BadRequest, match="cannot fit"):
        plan_launch(info, explicit, s, resolve_path, memory_bytes=(one + two) // 2)
