"""Issue 52, item 3: "Every backend gets the router's secrets ... A backend gets only
what it needs (its own backend key and settings), never the router's keys"."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.backend_key import ENV as KEY_ENV
from juggler.manager.child_env import child_env, is_inherited

from .conftest import FakeRegistry, Fakes, run, running, settings

ROUTER_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0",
    "PYTHONUNBUFFERED": "1",
    "OMP_NUM_THREADS": "2",
    "JUGGLER_API_KEY": "user-secret",
    "JUGGLER_ADMIN_API_KEY": "admin-secret",
    "JUGGLER_HOME": "/srv/juggler",
    "HF_TOKEN": "hf_secret",
    "AWS_SECRET_ACCESS_KEY": "aws",
}


def test_a_backend_inherits_what_a_program_needs_and_none_of_the_routers_secrets() -> None:
    env = child_env({KEY_ENV: "its-own-key"}, ROUTER_ENV)
    assert env[KEY_ENV] == "its-own-key"
    for name in ("PATH", "HOME", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"):
        assert env[name] == ROUTER_ENV[name]
    for name in ("JUGGLER_API_KEY", "JUGGLER_ADMIN_API_KEY", "JUGGLER_HOME", "HF_TOKEN"):
        assert name not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert not is_inherited("JUGGLER_BACKEND_KEY"), "a stale key of another backend"


@pytest.mark.slow
def test_a_command_backend_process_has_neither_router_key(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `command` backend (someone else's program) started by the real spawner: its
    process environment, as /proc shows it, holds neither key of the router."""
    monkeypatch.setenv("JUGGLER_API_KEY", "user-secret")
    monkeypatch.setenv("JUGGLER_ADMIN_API_KEY", "admin-secret")

    async def scenario() -> dict[str, str]:
        async with running(settings(), FakeRegistry(fakes.model("cmd"))) as m:
            snap = await m.load("cmd")
            assert snap.pid is not None
            raw = Path(f"/proc/{snap.pid}/environ").read_bytes().split(b"\0")
            return dict(item.decode().partition("=")[::2] for item in raw if item)

    env = run(scenario())
    assert "PATH" in env
    assert "JUGGLER_API_KEY" not in env and "JUGGLER_ADMIN_API_KEY" not in env
    assert not any("secret" in v for v in env.values())
