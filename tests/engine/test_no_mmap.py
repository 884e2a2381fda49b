"""llama-server's `--no-mmap` in a client's `llamacpp_args` (lemonade.md's own example of
`llamacpp_args`: `"--no-mmap"`): the engine then reads the model into memory instead of
mapping its file. Checked where it shows: the process's memory maps."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.engine.llama.native import Model
from juggler.engine_args import parse_llamacpp_args
from juggler.options import EngineFlags

pytestmark = pytest.mark.slow


def mapped(path: Path) -> bool:
    return str(path.resolve()) in Path("/proc/self/maps").read_text()


def test_no_mmap_reads_the_model_instead_of_mapping_it(smol_path: Path) -> None:
    """lemonade.md, /load: "`llamacpp_args` | Custom arguments to pass to llama-server"
    (its examples: `--no-mmap`); Juggler's engine flag is `--mmap off`."""
    flags = EngineFlags(**parse_llamacpp_args("--no-mmap --threads 1"))
    assert flags.mmap == "off" and flags.threads == 1
    assert "--mmap" in EngineFlags().to_argv()  # the default, "on", reaches the backend too
    unmapped = Model(str(smol_path), use_mmap=flags.mmap == "on")
    try:
        assert not mapped(smol_path)
    finally:
        del unmapped
    kept = Model(str(smol_path))
    try:
        assert mapped(smol_path), "the default maps the file: the check can see it"
    finally:
        del kept
