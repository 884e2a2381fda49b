"""Settings: precedence CLI > environment > config file > defaults, and validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juggler.config import (
    ConfigError,
    Settings,
    load_settings,
    parse_max_loaded_models,
    set_value,
)
from juggler.types import ModelType


def write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_defaults_without_any_source(tmp_path: Path) -> None:
    s = load_settings(environ={}, file=tmp_path / "none.json")
    assert s == Settings()
    assert s.host == "127.0.0.1" and s.port == 13305
    assert s.max_loaded_models == (1, 1, 1, 1, 1)


def test_file_beats_defaults(tmp_path: Path) -> None:
    f = write(tmp_path / "c.json", {"port": 9000, "ctx_size": 1024})
    s = load_settings(environ={}, file=f)
    assert (s.port, s.ctx_size) == (9000, 1024)


def test_env_beats_file(tmp_path: Path) -> None:
    f = write(tmp_path / "c.json", {"port": 9000})
    s = load_settings(environ={"JUGGLER_PORT": "9100"}, file=f)
    assert s.port == 9100


def test_cli_beats_env_and_file(tmp_path: Path) -> None:
    f = write(tmp_path / "c.json", {"port": 9000, "api_key": "file"})
    s = load_settings({"port": 9200, "host": None}, environ={"JUGGLER_PORT": "9100"}, file=f)
    assert s.port == 9200
    assert s.api_key == "file"  # untouched by the flags that were not given


def test_juggler_home_moves_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path))
    write(tmp_path / "config.json", {"ctx_size": 2048})
    assert load_settings(environ={}).ctx_size == 2048


def test_unknown_key_is_refused_with_its_name(tmp_path: Path) -> None:
    f = write(tmp_path / "c.json", {"bogus": 1})
    with pytest.raises(ConfigError, match="unknown setting 'bogus'"):
        load_settings(environ={}, file=f)


def test_bad_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="^port:"):
        load_settings(environ={"JUGGLER_PORT": "not-a-port"}, file=Path("/nonexistent"))


def test_max_loaded_models_one_number_applies_to_every_type() -> None:
    """Seed 001: "The same limit applies to every model type. Use `-1` for unlimited." """
    assert parse_max_loaded_models(3) == (3, 3, 3, 3, 3)
    assert parse_max_loaded_models("-1") == (-1,) * 5


def test_max_loaded_models_list_is_padded_with_one() -> None:
    """Seed 000: "If the user puts `--max-loaded-models 3` ... (pad with the default value of 1)";
    a list sets llm, embedding, reranking, audio, image in that order."""
    s = load_settings({"max_loaded_models": "5 2 4"}, environ={}, file=Path("/nonexistent"))
    assert s.max_loaded_models == (5, 2, 4, 1, 1)
    assert s.max_models_for(ModelType.RERANKING) == 4
    assert s.max_models_for(ModelType.IMAGE) == 1


@pytest.mark.parametrize("bad", [0, -2, "1 0", "1 2 3 4 5 6", "x"])
def test_max_loaded_models_refuses_zero_and_below_minus_one(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_loaded_models"):
        load_settings({"max_loaded_models": bad}, environ={}, file=Path("/nonexistent"))


def test_config_set_validates_and_persists(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    set_value("max_loaded_models", "3", f)
    set_value("auto_evict", "true", f)
    assert json.loads(f.read_text()) == {"max_loaded_models": [3, 3, 3, 3, 3], "auto_evict": True}
    with pytest.raises(ConfigError, match="unknown setting"):
        set_value("nope", "1", f)
    with pytest.raises(ConfigError, match="max_loaded_models"):
        set_value("max_loaded_models", "0", f)
    # a refused value leaves the file as it was
    assert json.loads(f.read_text())["max_loaded_models"] == [3, 3, 3, 3, 3]
