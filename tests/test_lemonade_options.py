"""Lemonade's load options as its own suite (commit e385039ed335) checks them, issue 24:
`merge_args` layering (012lc, 012le), `ctx_size: -1` as a value (012ld, 012r, 012t),
whole-second idle timeouts (012p), and llama-server's `--threads-batch` (012lc, 012le).
Fast: options are resolved, nothing is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from juggler import options as opt
from juggler.config import ConfigError, Settings, load_settings
from juggler.engine_args import layered_llamacpp_args, merge_llamacpp_args, parse_llamacpp_args
from juggler.errors import BadRequest
from tests.conftest import DEFAULT_MODEL, backend_headers, start_server


def flags_of(args: str) -> dict[str, Any]:
    return parse_llamacpp_args(args)


# -- merge_args ----------------------------------------------------------------------------
def test_a_loads_args_replace_the_saved_ones_and_keep_the_server_wide_ones() -> None:
    """lemonade.md: "If true (default), backend/machine `*_args` are inherited; concrete
    request `*_args` replace model/architecture args while keeping backend args" (its
    suite, 012le: global `--no-mmap --threads 1`, saved `--threads-batch 1`, load
    `--threads 2` gives `--threads 2` and `--no-mmap`, neither `--threads-batch 1` nor
    `--threads 1`)."""
    s = Settings(llamacpp_args="--no-mmap --threads 1")
    saved = {"llamacpp_args": "--threads-batch 1", "merge_args": True}
    got = s.model_options({"llamacpp_args": "--threads 2", "merge_args": True}, saved=saved)
    assert flags_of(got.llamacpp_args) == {"mmap": "off", "threads": 2}
    assert "--threads 2" in got.llamacpp_args and "--no-mmap" in got.llamacpp_args
    assert "--threads-batch" not in got.llamacpp_args
    assert "--threads 1 " not in got.llamacpp_args + " "


def test_with_no_server_wide_args_the_loads_replace_the_saved_ones() -> None:
    """Lemonade's suite, 012lc: saved `--threads 1 --threads-batch 1`, load `--threads 2`
    loads with `--threads 2` only (the saved entry itself is left alone)."""
    saved = {"llamacpp_args": "--threads 1 --threads-batch 1", "merge_args": True}
    got = Settings().model_options({"llamacpp_args": "--threads 2"}, saved=saved)
    assert got.llamacpp_args == "--threads 2"
    assert saved["llamacpp_args"] == "--threads 1 --threads-batch 1"


def test_without_a_loads_args_the_saved_ones_are_layered_over_the_server_wide_ones() -> None:
    """Lemonade's resolver: "no request inherits backend and model scope"; a model's flag
    beats the same flag server-wide."""
    s = Settings(llamacpp_args="--no-mmap --threads 1")
    got = s.model_options(None, saved={"llamacpp_args": "--threads 3 --parallel 2"})
    assert flags_of(got.llamacpp_args) == {"mmap": "off", "threads": 3, "parallel": 2}
    # An explicit null on /load skips the saved args (the manager leaves them out):
    assert s.model_options(None, saved={}).llamacpp_args == "--no-mmap --threads 1"
    # "empty request clears model scope and keeps backend"
    cleared = s.model_options({"llamacpp_args": ""}, saved={"llamacpp_args": "--threads 3"})
    assert cleared.llamacpp_args == "--no-mmap --threads 1"


def test_merge_args_false_applies_only_the_loads_own_args() -> None:
    """lemonade.md: "If false, no inherited custom args or overridable runtime defaults are
    applied"; its resolver's cases "merge false with request uses request only" and
    "merge false without request inherits no custom args"."""
    s = Settings(llamacpp_args="--no-mmap --threads 1")
    saved = {"llamacpp_args": "--parallel 2"}
    own = s.model_options({"llamacpp_args": "--threads 4", "merge_args": False}, saved=saved)
    assert own.llamacpp_args == "--threads 4" and own.merge_args is False
    assert s.model_options({"merge_args": False}, saved=saved).llamacpp_args == ""
    # merge_args is an option like the others: saved, or a server-wide default.
    assert s.model_options(None, saved={**saved, "merge_args": False}).llamacpp_args == ""
    off = Settings(llamacpp_args="--no-mmap", merge_args=False)
    assert off.model_options({"llamacpp_args": "--threads 2"}).llamacpp_args == "--threads 2"
    assert Settings().model_options().merge_args is True


@pytest.mark.parametrize(
    ("high", "low", "flags"),
    [
        ("--threads=4", "--threads 12 --batch-size 2048", {"threads": 4, "batch_size": 2048}),
        ("--no-mmap", "--mmap on --batch-size 2048", {"mmap": "off", "batch_size": 2048}),
        ("--mmap on", "--no-mmap", {"mmap": "on"}),
        ("", "--threads 2", {"threads": 2}),
        ("--threads 2", "", {"threads": 2}),
    ],
)
def test_a_flag_beats_the_same_flag_below_in_any_spelling(
    high: str, low: str, flags: dict[str, Any]
) -> None:
    """Lemonade's resolver: "request overrides same backend flag with equals syntax",
    "request negation overrides backend opposite"."""
    assert flags_of(merge_llamacpp_args(high, low)) == flags


def test_merged_args_replay_to_the_same_text() -> None:
    """`effective` replays as a /load body (012t): its merged args, given as a load's own,
    layer over the server-wide ones into the same text, so the load is the same."""
    server = "--no-mmap --threads 1"
    effective = layered_llamacpp_args(server, "--threads 2", None, merge=True)
    assert layered_llamacpp_args(server, None, effective, merge=True) == effective


def test_bad_args_in_any_layer_are_a_400_naming_llamacpp_args() -> None:
    with pytest.raises(BadRequest) as err:
        Settings(llamacpp_args="--no-mmap").model_options({"llamacpp_args": "--bogus 1"})
    assert err.value.param == "llamacpp_args"
    with pytest.raises(BadRequest, match="llamacpp_args"):
        Settings().model_options(None, saved={"llamacpp_args": "--threads x"})


# -- ctx_size -1 ---------------------------------------------------------------------------
def test_ctx_size_minus_one_is_a_value_in_every_layer() -> None:
    """lemonade.md: "`ctx_size: -1` is a concrete value meaning automatic context sizing,
    not a tombstone"; "`-1` to pin the model to automatic sizing even when the server-wide
    `ctx_size` is a specific number" (012r), and a load's -1 beats a saved size (012ld)."""
    s = Settings(ctx_size=8192)
    assert s.model_options().ctx_size == 8192
    assert s.model_options(None, saved={"ctx_size": -1}).ctx_size == opt.AUTO_CTX
    assert s.model_options({"ctx_size": -1}, saved={"ctx_size": 3072}).ctx_size == -1
    assert Settings(ctx_size=-1).model_options().ctx_size == -1
    assert opt.LoadOverrides.model_validate({"ctx_size": -1}, strict=True)


@pytest.mark.parametrize("value", [0, -5, 10, 4096.5, 1 << 64, "8192", "auto", ""])
def test_other_sizes_are_refused_naming_ctx_size(value: Any) -> None:
    """Lemonade's suite (012p): `-5` ("only -1 is a valid negative"), `0` ("only -1
    auto-resolves"), `4096.5` ("not a whole number"), strings; strictly typed on the
    options API, as Lemonade's."""
    with pytest.raises(Exception, match="ctx_size"):
        opt.LoadOverrides.model_validate({"ctx_size": value}, strict=True)
    if isinstance(value, str):
        return
    with pytest.raises(BadRequest) as err:
        Settings().model_options({"ctx_size": value})
    assert err.value.param == "ctx_size"
    with pytest.raises(BadRequest, match="ctx_size"):
        Settings().model_options(None, saved={"ctx_size": value})


# -- idle timeouts -------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["evict_idle_timeout", "downsize_idle_timeout"])
def test_idle_timeouts_are_whole_seconds(key: str, tmp_path: Path) -> None:
    """Lemonade's suite (012p): `{"evict_idle_timeout": 600.5}  # fractional value for a
    whole-number option` is a 400; its defaults are the whole numbers 300 and 60."""
    with pytest.raises(BadRequest) as err:
        Settings().model_options({key: 600.5})
    assert err.value.param == key
    with pytest.raises(Exception, match=key):
        opt.LoadOverrides.model_validate({key: 600.0}, strict=True)
    assert Settings().model_options({key: 600}).model_dump()[key] == 600
    with pytest.raises(ConfigError, match=key):
        load_settings(environ={opt.env_name(key): "1.5"}, file=tmp_path / "none.json")
    assert opt.ModelOptions().evict_idle_timeout == 300
    assert opt.ModelOptions().downsize_idle_timeout == 60


# -- --threads-batch -------------------------------------------------------------------------
def test_threads_batch_is_an_engine_flag() -> None:
    """Lemonade's suite saves `--threads 1 --threads-batch 1` as a model's llamacpp_args
    (012lc); llama-server's flag sets the threads of prompt (batch) decodes."""
    assert flags_of("--threads-batch 2") == {"threads_batch": 2}
    assert flags_of("--threads-batch=3 --threads 1") == {"threads_batch": 3, "threads": 1}
    argv = opt.EngineFlags(threads_batch=2).to_argv()
    assert argv[argv.index("--threads-batch") + 1] == "2"
    assert "--threads-batch" not in opt.EngineFlags().to_argv()  # None: as --threads
    with pytest.raises(BadRequest, match="--threads-batch"):
        flags_of("--threads-batch 0")


# -- on a running server ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_live_load_layers_its_args_sizes_its_context_and_keeps_its_process(
    tmp_path: Path,
) -> None:
    """Lemonade's suite on a running server: saved `--threads-batch 1` with `merge_args`
    (012le), a load's own args layered over the server-wide `--no-mmap`, `ctx_size: -1`
    resolved in health and the backend's argv (lemonade.md: "a `ctx_size` of `auto`
    appears here as a real number"), and asking for it again keeps the process (012t)."""
    server = start_server(
        tmp_path, env={opt.env_name("llamacpp_args"): "--no-mmap", opt.env_name("model"): ""}
    )
    url = f"/api/v1/models/{DEFAULT_MODEL}/options"
    body = {"model_name": DEFAULT_MODEL, "ctx_size": -1, "llamacpp_args": "--threads-batch 2"}
    try:
        with server.client(timeout=180) as c:
            saved = c.post(url, json={"llamacpp_args": "--threads-batch 1", "merge_args": True})
            assert saved.status_code == 200, saved.text
            assert saved.json()["effective"]["llamacpp_args"] == "--no-mmap --threads-batch 1"
            first = c.post("/api/v1/load", json=body)
            assert first.status_code == 200, first.text
            loaded = first.json()["model"]
            options = loaded["recipe_options"]
            assert options["llamacpp_args"] == "--no-mmap --threads-batch 2"
            assert options["ctx_size"] == 8192  # SmolLM2's trained context
            argv = loaded["launch_command"]
            assert argv[argv.index("--ctx-size") + 1] == "8192"
            assert argv[argv.index("--mmap") + 1] == "off"
            own = httpx.get(
                loaded["backend_url"] + "/health", headers=backend_headers(loaded["pid"])
            ).json()
            assert own["threads_batch"] == 2 and own["ctx_size"] == 8192
            again = c.post("/api/v1/load", json=body)
            assert again.status_code == 200, again.text
            assert again.json()["model"]["pid"] == loaded["pid"]
    finally:
        server.stop()
