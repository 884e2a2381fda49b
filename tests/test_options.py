"""One declaration of every load and engine option (juggler/options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler import options as opt
from juggler.config import ConfigError, Settings, load_settings, set_value
from juggler.engine_args import parse_llamacpp_args
from juggler.errors import BadRequest, NotImplementedParam


def test_settings_and_load_overrides_share_bounds_and_defaults() -> None:
    """Seed 000: "1. Values explicity passed in `load` [...] 2. Values set by the user as
    [...] CLI args or env vars. 3. Default hardcoded values"."""
    assert Settings().ctx_size == opt.ModelOptions().ctx_size == opt.EngineFlags().ctx_size
    settings = Settings(ctx_size=1024, llamacpp_args="--workers 2")
    resolved = settings.model_options({"ctx_size": 2048, "llamacpp_backend": None})
    assert resolved.ctx_size == 2048  # /load beats the setting
    assert resolved.llamacpp_args == "--workers 2"  # the setting beats the default
    with pytest.raises(BadRequest) as err:
        settings.model_options({"ctx_size": 10})
    assert err.value.param == "ctx_size"
    with pytest.raises(Exception, match="ctx_size"):
        opt.LoadOverrides(ctx_size=10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ('--workers "2', "No closing quotation"),
        ("--bogus 1", "unknown engine flag '--bogus'"),
        ("--workers", "--workers needs a value"),
        ("--workers -1", "--workers: Input should be greater than or equal to 0"),
        ("--flash-attn maybe", "--flash-attn"),
        ("--ctx-size 512", "set with the ctx_size option"),
        ("--n-gpu-layers 3", "set with the n_gpu_layers option"),
        ("--kv-cells 4096", "set with the kv_cells option"),
    ],
)
def test_bad_llamacpp_args_are_a_400_naming_the_flag(args: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as err:
        Settings().model_options({"llamacpp_args": args})
    assert err.value.status == 400 and err.value.param == "llamacpp_args"


def test_llamacpp_args_parse_into_engine_flags_and_back() -> None:
    values = parse_llamacpp_args("--workers 2 --parallel=4 --flash-attn off")
    assert values == {"workers": 2, "parallel": 4, "flash_attn": "off"}
    argv = opt.EngineFlags(ctx_size=512, **values).to_argv()
    assert argv[argv.index("--ctx-size") + 1] == "512"
    assert argv[argv.index("--workers") + 1] == "2"
    assert "--cache-cells" not in argv  # None: the engine's own default


def test_unbuilt_settings_are_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 9: "A user who sets a knob must get its effect or a clear error". A setting
    declared but not built is refused everywhere it can be set (none is, today)."""
    monkeypatch.setattr(opt, "UNBUILT_SETTINGS", {"evict_weight_factor": "not built"})
    with pytest.raises(NotImplementedParam) as err:
        Settings().model_options({"evict_weight_factor": 2.0})
    assert err.value.status == 400 and err.value.param == "evict_weight_factor"
    with pytest.raises(ConfigError, match="evict_weight_factor"):
        set_value("evict_weight_factor", "2", tmp_path / "config.json")
    with pytest.raises(ConfigError, match="evict_weight_factor"):
        load_settings(environ={opt.env_name("evict_weight_factor"): "2"}, file=tmp_path / "n")


def test_seed_002_settings_take_effect(tmp_path: Path) -> None:
    """Issue 11: "Per model `auto_evict`, `downsize_idle_timeout` (60 s),
    `evict_idle_timeout` (300 s), `evict_weight_factor` (1.0) on `/api/v1/load`"; the
    threshold is global (config file, env)."""
    options = Settings().model_options(
        {"auto_evict": True, "downsize_idle_timeout": 5, "evict_weight_factor": 3.0}
    )
    assert options.auto_evict and options.downsize_idle_timeout == 5
    assert options.evict_weight_factor == 3.0 and options.evict_idle_timeout == 300
    assert (
        set_value("auto_evict_threshold_pct", "0.5", tmp_path / "c.json").auto_evict_threshold_pct
        == 0.5
    )
    env = {opt.env_name("auto_evict_threshold_pct"): "0.7"}
    assert load_settings(environ=env, file=tmp_path / "n").auto_evict_threshold_pct == 0.7


def test_env_name_is_the_one_rule() -> None:
    assert opt.env_name("ctx_size") == "JUGGLER_CTX_SIZE"
    settings = load_settings(environ={"JUGGLER_CTX_SIZE": "777"}, file=Path("/nonexistent"))
    assert settings.ctx_size == 777
