"""A load's options in layers (issue 24, Lemonade's suite 012lc and 012le): lemonade.md,
"For `*_args`, a concrete value replaces the model/architecture args scope for that load;
backend/machine args remain only when `merge_args` is true". The manager keeps a load's
own options apart from the model's saved ones. Fake spawner: no processes."""

from __future__ import annotations

from juggler.manager import Manager

from .conftest import FakeRegistry, resolve_path, run, settings, stub
from .fake_spawner import FakeSpawner


def test_a_loads_args_replace_the_saved_ones_over_the_server_wide_ones() -> None:
    fake = FakeSpawner()
    saved = {"a": {"llamacpp_args": "--threads-batch 1", "merge_args": True}}

    async def scenario() -> None:
        m = Manager(
            settings(llamacpp_args="--no-mmap --threads 1"),
            FakeRegistry(stub("a")),
            resolve=resolve_path,
            spawner=fake,
            saved_options=lambda name: saved.get(name, {}),
        )
        await m.start()
        try:
            snap = await m.load("a", {"llamacpp_args": "--threads 2", "merge_args": True})
            assert snap.options.llamacpp_args == "--no-mmap --threads 2"
            plain = await m.load("a")  # the saved args, over the server-wide ones
            assert plain.options.llamacpp_args == "--no-mmap --threads 1 --threads-batch 1"
            skipped = await m.load("a", ignore_saved={"llamacpp_args"})  # a /load null
            assert skipped.options.llamacpp_args == "--no-mmap --threads 1"
            alone = await m.load("a", {"merge_args": False, "llamacpp_args": "--threads 2"})
            assert alone.options.llamacpp_args == "--threads 2"
            async with await m.acquire("a") as lease:  # loaded: it keeps its options
                assert lease.pid == fake.process("a").pid
            await m.unload("a")
            async with await m.acquire("a", {"ctx_size": 1024}):  # an auto-load layers too
                pass
            auto = next(s for s in m.snapshot() if s.model_name == "a")
            assert auto.options.ctx_size == 1024
            assert auto.options.llamacpp_args == "--no-mmap --threads 1 --threads-batch 1"
        finally:
            await m.stop()

    run(scenario())
