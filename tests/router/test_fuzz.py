"""Schemathesis over every route of a real router (issues 10 and 27): no input gives a
5xx, every status an operation answers with is documented, and a 405 lists the path's
methods in `Allow`. A short run, bounded by examples per operation, a fixed seed and a
time budget; `make fuzz` runs the long one (`tests/router/fuzz_rig.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.router.fuzz_rig import run_fuzz

pytestmark = pytest.mark.slow


def test_no_request_gets_a_server_error_or_an_undocumented_status(tmp_path: Path) -> None:
    run = run_fuzz(tmp_path, examples=10, max_time_s=90, timeout_s=400)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()
    assert any(" passed" in line for line in summary[-6:]), run.stdout[-2000:]
