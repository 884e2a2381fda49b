"""One declaration of every load and engine option (juggler/options.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler import options as opt
from juggler.config import ConfigError, Settings, load_settings, set_value
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
        ("--workers 0", "--workers: Input should be greater than or equal to 1"),
        ("--flash-attn maybe", "--flash-attn"),
        ("--ctx-size 512", "set with the ctx_size option"),
        ("--n-gpu-layers 3", "set with the llamacpp_backend option"),
    ],
)
def test_bad_llamacpp_args_are_a_400_naming_the_flag(args: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as err:
        Settings().model_options({"llamacpp_args": args})
    assert err.value.status == 400 and err.value.param == "llamacpp_args"


def test_llamacpp_args_parse_into_engine_flags_and_back() -> None:
    values = opt.parse_llamacpp_args("--workers 2 --parallel=4 --flash-attn off")
    assert values == {"workers": 2, "parallel": 4, "flash_attn": "off"}
    argv = opt.EngineFlags(ctx_size=512, **values).to_argv()
    assert argv[argv.index("--ctx-size") + 1] == "512"
    assert argv[argv.index("--workers") + 1] == "2"
    assert "--cache-cells" not in argv  # None: the engine's own default


def test_unbuilt_settings_are_refused_not_ignored(tmp_path: Path) -> None:
    """Issue 9: "A user who sets a knob must get its effect or a clear error"."""
    for key in opt.UNBUILT_SETTINGS:
        if key in opt.MODEL_OPTION_KEYS:
            with pytest.raises(NotImplementedParam) as err:
                Settings().model_options({key: 2.0 if key != "auto_evict_threshold_pct" else 0.5})
            assert err.value.status == 400 and err.value.param == key
        value = "0.5" if key == "auto_evict_threshold_pct" else "2"
        with pytest.raises(ConfigError, match=key):
            set_value(key, value, tmp_path / "config.json")
        with pytest.raises(ConfigError, match=key):
            load_settings(environ={opt.env_name(key): value}, file=tmp_path / "none.json")


def test_env_name_is_the_one_rule() -> None:
    assert opt.env_name("ctx_size") == "JUGGLER_CTX_SIZE"
    settings = load_settings(environ={"JUGGLER_CTX_SIZE": "777"}, file=Path("/nonexistent"))
    assert settings.ctx_size == 777
