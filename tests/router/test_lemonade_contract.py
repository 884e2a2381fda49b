"""Issue 24, item 6: Lemonade's HTTP contract at its commit (reference/lemonade/), against a
real router and real backends: health's `telemetry` and `launch_command`, load options
on an inference body, `cache_tokens`, the idle evaluation, a pin across a watchdog reload,
`/slots` and `/tokenize` as llama.cpp defines them, and the `lemonade_*` metric families.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow
HELLO = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("contract"), "--model", "", "--ctx-size", "1024")
    try:
        yield srv
    finally:
        srv.stop()


def loaded(server: RunningServer, name: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = server.health()["all_models_loaded"]  # type: ignore[assignment]
    return next((m for m in entries if m["model_name"] == name), None)


def test_health_telemetry_and_launch_command_as_a_list(server: RunningServer) -> None:
    """lemonade.md, health: "`telemetry` - Structured telemetry state object: `enabled` -
    Boolean indicating if telemetry collection is active; `captures` - *(optional)* ...
    only present when `enabled` is `true`", and "`launch_command` - The command used to
    start the backend engine, as an array with the program first and its arguments after
    it"."""
    with server.client() as c:
        assert c.post("/api/v1/load", json={"model_name": DEFAULT_MODEL}).status_code == 200
        health = c.get("/api/v1/health").json()
    assert health["telemetry"] == {"enabled": False}
    entry = next(m for m in health["all_models_loaded"] if m["model_name"] == DEFAULT_MODEL)
    command = entry["launch_command"]
    assert isinstance(command, list) and all(isinstance(part, str) for part in command)
    assert "python" in command[0].rsplit("/", 1)[-1], "the program comes first"
    port = command[command.index("--port") + 1]
    assert urlsplit(entry["backend_url"]).port == int(port)
    # The backend runs the resolved file: the checkpoint's file name is in its arguments.
    file_name = entry["checkpoint"].split(":")[-1].rsplit("/", 1)[-1]
    assert any(file_name in part for part in command), command
