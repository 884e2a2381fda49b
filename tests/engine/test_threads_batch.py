"""llama-server's `--threads-batch` in a client's `llamacpp_args` (Lemonade's suite saves
`--threads 1 --threads-batch 1` for a model, 012lc): the threads of llama.cpp's decodes of
more than one token (prompts, several sequences at once), `n_threads_batch` of every
context the backend creates. Checked on the contexts llama.cpp holds."""

from __future__ import annotations

from pathlib import Path

import llama_cpp.llama_cpp as C
import pytest

from juggler.engine.engine_config import EngineConfig, embed_worker_config, worker_config
from juggler.engine.llama.native import Model
from juggler.engine.llama.ports import ContextParams
from juggler.engine_args import parse_llamacpp_args
from juggler.options import EngineFlags


def test_the_flag_reaches_every_workers_settings() -> None:
    flags = EngineFlags(**parse_llamacpp_args("--threads 1 --threads-batch 2"))
    config = EngineConfig("m", "m", flags=flags)
    assert worker_config(config).n_threads_batch == 2
    assert embed_worker_config(config, 512).n_threads_batch == 2
    assert worker_config(EngineConfig("m", "m")).n_threads_batch == 0  # as the threads


@pytest.mark.slow
def test_a_context_decodes_batches_with_the_batch_threads(smol_path: Path) -> None:
    """llama.cpp: `n_threads_batch`, "number of threads to use for batch processing";
    the compute plan's thread changes (`set_threads`) leave a fixed one alone."""
    model = Model(str(smol_path))
    fixed = model.new_context(ContextParams(256, 64, 64, 1, n_threads=1, n_threads_batch=2))
    following = model.new_context(ContextParams(256, 64, 64, 1, n_threads=1))
    try:
        assert C.llama_n_threads(fixed.ptr) == 1
        assert C.llama_n_threads_batch(fixed.ptr) == 2
        fixed.set_threads(3)
        assert C.llama_n_threads(fixed.ptr) == 3
        assert C.llama_n_threads_batch(fixed.ptr) == 2
        assert C.llama_n_threads_batch(following.ptr) == 1
        following.set_threads(2)
        assert C.llama_n_threads_batch(following.ptr) == 2
    finally:
        fixed.close()
        following.close()
        C.llama_model_free(model.ptr)  # unmapped again: test_no_mmap looks at the maps
