"""The session API through the router: one backend per session, never a reload."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("sessions"), "--model", "", "--ctx-size", "1024", "--parallel", "4"
    )
    try:
        yield srv
    finally:
        srv.stop()


def generate(c: httpx.Client, sid: str, n: int = 8) -> list[dict[str, object]]:
    events = []
    with c.stream(
        "POST", f"/api/v1/sessions/{sid}/generate", json={"max_new_tokens": n, "temperature": 0}
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def test_session_answers_always_name_the_session_in_the_url(server: RunningServer) -> None:
    """Issue 10: "Session routes answer with a `session_id` different from the one in the
    URL" must not happen."""
    with server.client() as c:
        created = c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()
        sid = created["session_id"]
        got = c.post(
            f"/api/v1/sessions/{sid}/input",
            json={"messages": [{"role": "user", "content": "Say hi."}]},
        ).json()
        assert got["session_id"] == sid
        events = generate(c, sid)
        assert events[-1].get("done") is True
        assert c.post(f"/api/v1/sessions/{sid}/cancel").json()["session_id"] == sid
        assert c.delete(f"/api/v1/sessions/{sid}").json()["session_id"] == sid
        gone = c.post(f"/api/v1/sessions/{sid}/input", json={"text": "x"})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"


def test_session_of_an_unloaded_model_is_gone_and_nothing_reloads(server: RunningServer) -> None:
    """Seed 003: "No session migration: a session is pinned to one worker for its
    lifetime." When its backend is unloaded the session is gone (404), and a session
    request never loads the model again."""
    with server.client() as c:
        sid = c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"]
        c.post(f"/api/v1/sessions/{sid}/input", json={"text": "Once upon a time"})
        assert c.post("/api/v1/unload", json={"model_name": DEFAULT_MODEL}).status_code == 200
        for action in ("input", "generate", "cancel"):
            r = c.post(f"/api/v1/sessions/{sid}/{action}", json={"text": "more"})
            assert r.status_code == 404, (action, r.text)
            assert r.json()["error"]["code"] == "session_not_found"
        assert server.health()["all_models_loaded"] == [], "a session request reloaded the model"


def test_unknown_session_is_404_and_bad_create_is_400(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post("/api/v1/sessions/nope/input", json={"text": "x"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
        bad = c.post("/api/v1/sessions", json={"model": 3})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "model"
        missing = c.post("/api/v1/sessions", json={"model": "no-such-model"})
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found"


def test_idle_sessions_holding_every_sequence_never_make_a_chat_wait(
    server: RunningServer,
) -> None:
    """Issue 10, point 2: "Eight idle sessions (the default `--parallel 8`) hold every
    sequence slot and every ordinary chat request then waits forever." Now the least
    recently used idle session is parked (KV to host memory) and the chat answers; every
    session then continues (tests/engine/test_session_parking.py shows the answers are
    exactly those without parking)."""
    chat = {
        "model": DEFAULT_MODEL,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    with server.client(timeout=60) as c:
        sids = []
        for i in range(5):  # the fixture's backend has 4 sequences
            sid = c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"]
            c.post(f"/api/v1/sessions/{sid}/input", json={"text": f"Story {i}: once upon"})
            assert generate(c, sid, 4)[-1].get("done") is True
            sids.append(sid)
        r = c.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
        for sid in sids:  # each one continues: restored, or its KV decoded again
            assert generate(c, sid, 4)[-1].get("done") is True
        for sid in sids:
            assert c.delete(f"/api/v1/sessions/{sid}").status_code == 200
