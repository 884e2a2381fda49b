"""One Ollama answer: the backend's OpenAI stream (chat or completion chunks, always
with usage) as Ollama's objects, NDJSON lines or one object, timed by the router.

`load_duration` is the time until the backend started answering (queueing and loading
included), `prompt_eval_duration` until its first token, `eval_duration` the rest. Tool
calls come whole (`message.tool_calls`, arguments as an object) as soon as each is
complete, as Ollama streams them; `done_reason` stays Ollama's ("stop" or "length").
Runs in the route's task.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request, Response

from juggler.errors import JugglerError
from juggler.router.ollama import wire as ol
from juggler.router.ollama.messages import ToolCalls, ollama_param
from juggler.router.ollama.wire import line

#: How often a non-streaming answer checks that its client is still there.
DISCONNECT_POLL_S = 0.25


class Thinking(str):
    """A piece of a reasoning model's thinking (Ollama's `thinking`)."""


#: What `OllamaAnswer.items` yields: a text piece, thinking, or tool calls that just
#: became whole.
Item = str | list[dict[str, Any]]


def backend_error(response: Response) -> JugglerError:
    """A backend's JSON error answer as the error it stands for (naming Ollama's fields
    where the backend named the OpenAI fields they became)."""
    try:
        err = json.loads(bytes(response.body)).get("error", {})
    except (ValueError, AttributeError):
        err = {}
    message = str(err.get("message") or f"backend answered {response.status_code}")
    exc = JugglerError(ollama_param(message))
    exc.status = response.status_code
    exc.code = str(err.get("code") or "backend_error")
    exc.param = ollama_param(str(err["param"])) if err.get("param") else None
    return exc


class OllamaAnswer:
    """Backend OpenAI stream -> Ollama objects (`chat`: /api/chat's `message`, else
    /api/generate's `response`)."""

    def __init__(self, asked: str, chat: bool, t0: float) -> None:
        self.asked, self.chat = asked, chat
        #: Whether the backend answers in chat chunks (`delta`) or completion ones (`text`).
        self.from_chat = chat
        self.t0 = self.t_open = t0
        self.t_first: float | None = None
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.calls = ToolCalls()

    def piece(
        self, text: str, calls: list[dict[str, Any]] | None = None, thinking: str = ""
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.asked, "created_at": ol.now_iso()}
        if self.chat:
            out["message"] = {"role": "assistant", "content": text}
            if thinking:
                out["message"]["thinking"] = thinking
            if calls:
                out["message"]["tool_calls"] = calls
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        return {**out, "done": False}

    def final(
        self, text: str = "", calls: list[dict[str, Any]] | None = None, thinking: str = ""
    ) -> dict[str, Any]:
        end = time.perf_counter()
        first = self.t_first or end
        out = self.piece(text, calls, thinking)
        out.update(
            done=True,
            done_reason=ol.done_reason(self.finish),
            total_duration=int((end - self.t0) * 1e9),
            load_duration=int((self.t_open - self.t0) * 1e9),
            prompt_eval_count=int(self.usage.get("prompt_tokens", 0)),
            prompt_eval_duration=int((first - self.t_open) * 1e9),
            eval_count=int(self.usage.get("completion_tokens", 0)),
            eval_duration=int((end - first) * 1e9),
        )
        return out

    def _read(self, choice: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
        if not self.from_chat:
            return str(choice.get("text") or ""), [], ""
        delta = choice.get("delta") or {}
        deltas = delta.get("tool_calls")
        calls = self.calls.feed(deltas) if deltas else []
        if deltas and self.t_first is None:
            self.t_first = time.perf_counter()
        return str(delta.get("content") or ""), calls, str(delta.get("reasoning_content") or "")

    async def items(self, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Item]:
        """Text pieces and whole tool calls; raises a backend's in-stream error."""
        async for ev in events:
            if "error" in ev:
                err = ev["error"] if isinstance(ev["error"], dict) else {"message": ev["error"]}
                raise JugglerError(ollama_param(str(err.get("message", "backend error"))))
            if ev.get("usage"):
                self.usage = ev["usage"]
            for choice in ev.get("choices") or []:
                if choice.get("finish_reason"):
                    self.finish = choice["finish_reason"]
                text, calls, thinking = self._read(choice)
                if thinking:
                    if self.t_first is None:
                        self.t_first = time.perf_counter()
                    yield Thinking(thinking)
                if text:
                    if self.t_first is None:
                        self.t_first = time.perf_counter()
                    yield text
                if calls:
                    yield calls
        rest = self.calls.finish()
        if rest:
            yield rest
        if self.calls.leftover:
            yield self.calls.leftover

    async def ndjson(self, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        try:
            async for item in self.items(events):
                if isinstance(item, Thinking):
                    yield line(self.piece("", thinking=item))
                else:
                    yield line(self.piece(item) if isinstance(item, str) else self.piece("", item))
            yield line(self.final())
        except JugglerError as exc:
            yield line({"error": exc.message})

    async def whole(
        self, events: AsyncIterator[dict[str, Any]], request: Request
    ) -> dict[str, Any]:
        parts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        checked = time.monotonic()
        async for item in self.items(events):
            if isinstance(item, Thinking):
                thoughts.append(item)
            elif isinstance(item, str):
                parts.append(item)
            else:
                calls += item
            if time.monotonic() - checked > DISCONNECT_POLL_S:
                checked = time.monotonic()
                if await request.is_disconnected():
                    break  # closing the stream cancels the generation in the backend
        return self.final("".join(parts), calls, "".join(thoughts))
