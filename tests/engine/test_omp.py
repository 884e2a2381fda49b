"""Issue 47: an idle engine worker gives back its OpenMP pool (`engine.omp`), on real
llama.cpp: the helper threads a two-thread decode started end when the worker's thread
calls `release_pool`."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.engine.omp import release_pool


def threads_of_process() -> set[str]:
    return set(os.listdir("/proc/self/task"))


@pytest.mark.slow
def test_a_worker_thread_releases_the_helpers_its_decode_started(smol_path: Path) -> None:
    model = Model(str(smol_path))
    seen: dict[str, object] = {}

    def worker() -> None:
        params = ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=1, n_threads=2)
        ctx = model.new_context(params)
        batch = model.new_batch(64)
        before = threads_of_process()
        for pos, tok in enumerate(model.tokenize("Hello there, how are you?", add_special=True)):
            batch.add(tok, pos, 0, False)
        assert ctx.decode(batch) == 0
        seen["helpers"] = threads_of_process() - before
        seen["released"] = release_pool()
        seen["after"] = threads_of_process() & seen["helpers"]  # type: ignore[operator]
        ctx.close()

    t = threading.Thread(target=worker)
    t.start()
    t.join(timeout=300)
    if "libgomp" not in Path("/proc/self/maps").read_text():
        pytest.skip("this llama.cpp build does not use OpenMP")
    assert seen["helpers"], "a two-thread decode started no helper thread"
    assert seen["released"] is True
    assert seen["after"] == set(), "the helpers outlived release_pool"
