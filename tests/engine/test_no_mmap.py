"""llama-server's `--no-mmap` in a client's `llamacpp_args` (lemonade.md's own example of
`llamacpp_args`: `"--no-mmap"`): the engine then reads the model into memory instead of
mapping its file. Checked where it shows: the memory maps of a fresh process (this test
process may hold the file mapped already, from another test's model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from juggler.engine_args import parse_llamacpp_args
from juggler.options import EngineFlags

pytestmark = pytest.mark.slow

PROBE = """
import sys
from pathlib import Path
from juggler.engine.llama.native import Model
path, use_mmap = sys.argv[1], sys.argv[2] == "on"
model = Model(path, use_mmap=use_mmap)
print(str(Path(path).resolve()) in Path("/proc/self/maps").read_text())
"""


def mapped_by_a_fresh_process(path: Path, mmap: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), mmap],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def test_no_mmap_reads_the_model_instead_of_mapping_it(smol_path: Path) -> None:
    """lemonade.md, /load: "`llamacpp_args` | Custom arguments to pass to llama-server"
    (its examples: `--no-mmap`); Juggler's engine flag is `--mmap off`."""
    flags = EngineFlags(**parse_llamacpp_args("--no-mmap --threads 1"))
    assert flags.mmap == "off" and flags.threads == 1
    assert "--mmap" in EngineFlags().to_argv()  # the default, "on", reaches the backend too
    assert not mapped_by_a_fresh_process(smol_path, flags.mmap)
    assert mapped_by_a_fresh_process(smol_path, "on"), "the default maps: the check can see it"
