"""`juggler`: serve, configure, and drive a running server (pull, list, delete, load,
unload, pin, ps).

The commands live in one module per group (serve, config_cmd, models, residency_cmd,
run_cmd); importing them registers them on the Typer app in `common`.
"""

from __future__ import annotations

import sys

from juggler.cli import (  # noqa: F401  (they register commands)
    config_cmd,
    models,
    residency_cmd,
    run_cmd,
    serve,
)
from juggler.cli.common import app


def fold_list_option(argv: list[str], option: str = "--max-loaded-models") -> list[str]:
    """Let `--max-loaded-models 5 2 4` (seed 000) through click: join the numbers that
    follow the option into one value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] == option:
            numbers: list[str] = []
            i += 1
            while i < len(argv) and argv[i].lstrip("-").isdigit() and len(numbers) < 6:
                numbers.append(argv[i])
                i += 1
            out.append(" ".join(numbers))
            continue
        i += 1
    return out


def main() -> None:
    try:
        app(args=fold_list_option(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
