"""`python -m juggler.engine`'s command line: built from EngineFlags, validated by it."""

from __future__ import annotations

import os

import pytest

from juggler.engine.__main__ import build_parser, engine_flags, main
from juggler.engine.engine_config import EngineConfig
from juggler.options import EngineFlags, flag_of

IDENTITY = ["--model-path", "m.gguf", "--model-name", "m", "--port", "1"]


def test_every_engine_flag_is_declared_with_its_default_and_help() -> None:
    actions = {a.dest: a for a in build_parser()._actions}
    for name, info in EngineFlags.model_fields.items():
        action = actions[name]
        assert action.option_strings == [flag_of(name)]
        assert action.default == info.default and action.help == info.description
    assert actions["flash_attn"].choices == ("auto", "on", "off")


def test_flags_written_by_the_manager_parse_back_to_the_same_flags() -> None:
    flags = EngineFlags(ctx_size=1024, workers=2, threads=0, flash_attn="on", cache_cells=5)
    parser = build_parser()
    assert engine_flags(parser, parser.parse_args([*IDENTITY, *flags.to_argv()])) == flags


def test_threads_0_means_every_core() -> None:
    assert EngineConfig("m", "m", flags=EngineFlags(threads=0)).n_threads == os.cpu_count()
    assert EngineConfig("m", "m", flags=EngineFlags(threads=3)).n_threads == 3


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--parallel", "0"], "--parallel"),
        (["--parallel", "300"], "--parallel"),
        (["--ctx-size", "big"], "--ctx-size"),
        (["--flash-attn", "maybe"], "--flash-attn"),
        (["--cache-cells", "-1"], "--cache-cells"),
    ],
)
def test_an_invalid_value_exits_2_naming_its_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*IDENTITY, *argv])
    assert exited.value.code == 2
    assert flag in capsys.readouterr().err
