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


def test_load_options_on_a_chat_body_reach_the_auto_load_only_through_the_allowlist(
    server: RunningServer,
) -> None:
    """Issue 24: "a chat/completions body may carry Lemonade's load options (`pinned`,
    `ctx_size`, ...): only the allowlisted ones reach the auto-load, the request is
    served" (Lemonade's server keeps "an explicit allowlist so request-scoped fields do
    not leak into recipe options": `ctx_size`)."""
    with server.client() as c:
        c.post("/api/v1/unload", json={})
        body = {
            "model": DEFAULT_MODEL,
            "messages": HELLO,
            "max_tokens": 5,
            "temperature": 0.99,
            "seed": 42,
            "pinned": True,
            "llamacpp_args": "--foo-bar",
            "auto_evict": True,
            "evict_idle_timeout": 1,
            "ctx_size": 768,
            "max_completion_tokens": 5,
        }
        r = c.post("/api/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        entry = loaded(server, DEFAULT_MODEL)
        assert entry is not None
        options = entry["recipe_options"]
        assert options["ctx_size"] == 768
        assert entry["pinned"] is False and options["auto_evict"] is False
        assert options["evict_idle_timeout"] != 1 and "--foo-bar" not in options["llamacpp_args"]
        # A loaded model keeps its options: the next body's ctx_size changes nothing.
        again = c.post("/api/v1/chat/completions", json={**body, "ctx_size": 512})
        after = loaded(server, DEFAULT_MODEL)
        assert again.status_code == 200 and after is not None
        assert (after["pid"], after["recipe_options"]) == (entry["pid"], options)
        bad = c.post(
            "/api/v1/completions", json={"model": DEFAULT_MODEL, "prompt": "a", "ctx_size": 1}
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "ctx_size"
