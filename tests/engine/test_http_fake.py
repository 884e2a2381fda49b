"""The backend's HTTP face on the fake model: OpenAI shapes, SSE framing, the session
API. Milliseconds; the real model's contract is pinned in test_http_api.py."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from juggler.engine.engine_config import EngineConfig
from juggler.engine.http.server import create_app
from juggler.engine.runtime import Engine
from juggler.options import EngineFlags
from tests.engine.fake_llama import FakeLlama, text_of


def client() -> TestClient:
    config = EngineConfig("fake.gguf", "fake", flags=EngineFlags(threads=1, ctx_size=512))
    return TestClient(create_app(Engine(config, FakeLlama())))


def sse(text: str) -> list[Any]:
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
    return out


def test_chat_and_completions_answer_in_openai_shapes() -> None:
    with client() as c:
        h = c.get("/health").json()
        assert h["status"] == "ok" and h["ctx_size"] == 512 and h["parallel"] == 8
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 1}
        chat = c.post("/v1/chat/completions", json=body).json()
        assert chat["object"] == "chat.completion"
        assert chat["choices"][0]["finish_reason"] == "length"
        assert len(chat["choices"][0]["message"]["content"]) == 4
        assert chat["usage"]["completion_tokens"] == 4
        req = {"prompt": "ab", "max_tokens": 3, "stream": True}
        req["stream_options"] = {"include_usage": True}
        events = sse(c.post("/v1/completions", json=req).text)
        assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] == 3
        assert events[-3]["choices"][0]["finish_reason"] == "length"
        assert all(e["object"] == "text_completion" for e in events[:-1])
        bad = c.post("/v1/completions", json={"prompt": "ab", "suffix": "x"})
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"


def test_the_session_api_over_http() -> None:
    with client() as c:
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        appended = c.post(f"/v1/sessions/{sid}/input", json={"text": "ab"}).json()
        assert appended == {"session_id": sid, "n_tokens": 3, "n_past": 3}
        req = {"max_new_tokens": 3, "temperature": 0}
        events = sse(c.post(f"/v1/sessions/{sid}/generate", json=req).text)
        done = events[-2]
        assert events[-1] == "[DONE]" and done["done"] and done["finish_reason"] == "length"
        ids = [t for e in events[:-2] for t in e["token_ids"]]
        assert "".join(e["text"] for e in events[:-2]) == text_of(ids)
        assert done["usage"]["prompt_tokens_prefilled"] == 3
        assert c.delete(f"/v1/sessions/{sid}").json()["deleted"] is True
        gone = c.post(f"/v1/sessions/{sid}/cancel")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"
