"""The CLI's everyday verbs against a running server (issue 13's CLI parity): pull with a
progress bar from the server's event stream, list, ps, delete, config set/get."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.registry.hub import StandInHub, running_hub

pytestmark = pytest.mark.slow
GGUF = b"GGUF" + bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture(scope="module")
def hub() -> Iterator[StandInHub]:
    with running_hub({"unsloth/Qwen3-0.6B-GGUF": {"Qwen3-0.6B-Q4_0.gguf": GGUF}}) as h:
        yield h


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, hub: StandInHub) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("cli"), "--model", "", env={"HF_ENDPOINT": hub.url})
    try:
        yield srv
    finally:
        srv.stop()


def cli(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUGGLER_")}
    env.update(JUGGLER_HOME=str(server.home), JUGGLER_PORT=server.base_url.rsplit(":", 1)[1])
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the CLI itself never downloads here
    return subprocess.run(
        [sys.executable, "-m", "juggler", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_pull_shows_progress_and_list_shows_the_download(server: RunningServer) -> None:
    r = cli(server, "pull", "Qwen3-0.6B-GGUF")
    assert r.returncode == 0, r.stderr
    assert "Qwen3-0.6B-Q4_0.gguf" in r.stdout and "Installed model: Qwen3-0.6B-GGUF" in r.stdout
    assert "1.0/1.0 MB" in r.stdout or "1.0 MB" in r.stdout
    r = cli(server, "list", "--downloaded")
    assert "Qwen3-0.6B-GGUF" in r.stdout and DEFAULT_MODEL in r.stdout
    assert "Qwen3-8B-GGUF" not in r.stdout
    assert "Qwen3-8B-GGUF" in cli(server, "list").stdout
    r = cli(server, "delete", "Qwen3-0.6B-GGUF")
    assert r.returncode == 0 and "Deleted model: Qwen3-0.6B-GGUF" in r.stdout
    assert "Qwen3-0.6B-GGUF" not in cli(server, "list", "--downloaded").stdout


def test_a_failed_pull_says_why(server: RunningServer) -> None:
    r = cli(server, "pull", "user.x", "--checkpoint", "acme/none-GGUF:Q4_0")
    assert r.returncode == 1 and "not found" in r.stderr
    r = cli(server, "pull", "extra.thing")
    assert r.returncode == 1 and "400" in r.stderr


def test_ps_shows_loaded_models(server: RunningServer) -> None:
    assert cli(server, "load", DEFAULT_MODEL, "--ctx-size", "512").returncode == 0
    r = cli(server, "ps")
    assert r.returncode == 0 and DEFAULT_MODEL in r.stdout and "512" in r.stdout
    assert cli(server, "unload").returncode == 0


def test_config_set_reaches_the_server_and_the_file(server: RunningServer) -> None:
    r = cli(server, "config", "set", "ctx_size=1536")
    assert r.returncode == 0 and "applied to the running server" in r.stdout
    with server.client() as c:
        assert c.get("/internal/config").json()["ctx_size"] == 1536
    stored = json.loads((Path(server.home) / "config.json").read_text())
    assert stored["ctx_size"] == 1536
    r = cli(server, "config", "set", "port=1")
    assert "when Juggler starts" in r.stdout
    cli(server, "config", "set", "port=13305")
    assert cli(server, "config", "get", "ctx_size").stdout.strip() == "1536"
