"""Issue 27: "Health tells the truth": a backend whose engine holds work and makes no
progress says so on /health (503 `stalled`); one that progresses, or is idle, is ok; and
the manager's stall watch has the owner restart a stalled backend."""

from __future__ import annotations

import asyncio
import threading
import time

from fastapi.testclient import TestClient

from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.server import create_app
from juggler.engine.runtime import Engine
from juggler.manager import messages as m
from juggler.manager.snapshot import ServerState
from juggler.manager.stall_watch import StallWatch
from juggler.options import EngineFlags
from tests.engine.fake_llama import FakeLlama, Faults


def wait_for(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def test_a_wedged_worker_makes_health_say_stalled_and_recovery_clears_it() -> None:
    wedge = threading.Event()
    fake = FakeLlama(Faults(wedge=wedge))
    flags = EngineFlags(threads=1, ctx_size=512, stall_timeout=0.3)
    engine = Engine(EngineConfig("fake.gguf", "fake", flags=flags), fake)
    with TestClient(create_app(engine, key="")) as c:
        assert c.get("/health").json()["status"] == "ok"
        time.sleep(0.5)  # idle for longer than the timeout: still ok (no work held)
        assert c.get("/health").status_code == 200
        wedge.set()
        body = {"prompt": "ab", "max_tokens": 3}
        done: list[int] = []
        t = threading.Thread(
            target=lambda: done.append(c.post("/v1/completions", json=body).status_code)
        )
        t.start()
        wait_for(lambda: c.get("/health").status_code == 503)
        health = c.get("/health").json()
        assert health["status"] == "stalled" and "no progress" in health["error"]
        wedge.clear()  # it moves again
        t.join(timeout=30)
        assert done == [200]
        wait_for(lambda: c.get("/health").status_code == 200)


def test_the_stall_watch_reports_only_a_backends_own_stalled_verdict() -> None:
    from juggler.manager.snapshot import ServerSnapshot
    from juggler.options import ModelOptions
    from juggler.types import Device, ModelType

    def snap(sid: int, recipe: str = "llamacpp") -> ServerSnapshot:
        return ServerSnapshot(
            server_id=sid, model_name=f"m{sid}", checkpoint="", type=ModelType.LLM,
            device=Device.CPU, recipe=recipe, backend_url=f"http://x:{sid}", pid=1,
            last_use=0.0, pinned=False, status=ServerState.READY, in_flight=0,
            options=ModelOptions(),
        )  # fmt: skip

    answers = {1: "ok", 2: "stalled", 3: None, 4: "stalled"}
    posted: list[m.Message] = []

    async def ask(s: ServerSnapshot) -> str | None:
        return answers[s.server_id]

    servers = [snap(1), snap(2), snap(3), snap(4, recipe="command")]
    watch = StallWatch(lambda: servers, ask, posted.append)
    asyncio.run(watch.sweep())
    assert [(type(p).__name__, p.server_id) for p in posted] == [("ProbeFailed", 2)]  # type: ignore[union-attr]
