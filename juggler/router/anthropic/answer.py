"""One Anthropic answer: the backend's OpenAI chat stream (always with usage) as the
Messages API's events, or folded into one `Message`.

The events, in order: `message_start` (an empty message), `ping` (again whenever the
backend has been silent for the router's heartbeat interval), then for each content
block `content_block_start`, its deltas (`text_delta`, or `input_json_delta` pieces of a
`tool_use` block's input as the backend streams the call's arguments) and
`content_block_stop` (a reasoning model's thinking first, as a `thinking` block of
`thinking_delta`s closed by a `signature_delta`); then `message_delta` (`stop_reason`, `stop_sequence`, usage) and
`message_stop`. An error after the start is an `error` event.

`stop_reason`: `tool_use` when the model called tools, `max_tokens` when `max_tokens` cut
it (`model_context_window_exceeded` when the context filled first), `stop_sequence` when
one of `stop_sequences` ended it (the backend names it: its choice's `stop_reason`, as
vLLM's does), else `end_turn`. Usage: `input_tokens` are the prompt's tokens the backend
computed, `cache_read_input_tokens` those its prefix cache held. `MessageEvents` is pure;
the functions below it run in the route's task.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request, Response

from juggler.api import sse
from juggler.errors import JugglerError
from juggler.router.anthropic import wire as an
from juggler.router.anthropic.request import anthropic_param

#: How often a non-streaming answer checks that its client is still there.
DISCONNECT_POLL_S = 0.25
Event = dict[str, Any]


def backend_error(response: Response | dict[str, Any]) -> JugglerError:
    """A backend's JSON error (an answer, or an in-stream error event) as the error it
    stands for, naming Anthropic's fields where the backend named the OpenAI ones."""
    status = 500
    if isinstance(response, Response):
        status = response.status_code
        try:
            data = json.loads(bytes(response.body))
        except ValueError:
            data = {}
    else:
        data = response
    err = data.get("error") if isinstance(data, dict) else None
    err = err if isinstance(err, dict) else {"message": err}
    exc = JugglerError(anthropic_param(str(err.get("message") or f"backend answered {status}")))
    exc.status = status
    exc.code = str(err.get("code") or "backend_error")
    exc.param = anthropic_param(str(err["param"])) if err.get("param") else None
    return exc


def usage(openai_usage: dict[str, Any]) -> dict[str, int]:
    prompt = int(openai_usage.get("prompt_tokens") or 0)
    cached = int((openai_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "input_tokens": prompt - cached,
        "output_tokens": int(openai_usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": cached,
    }


def stop_reason(finish: str | None, stop_sequence: str | None, done: int, limit: int) -> str:
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens" if done >= limit else "model_context_window_exceeded"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


class MessageEvents:
    """Backend OpenAI chat chunks -> Anthropic stream events; one per answer. `start`,
    `feed` and `end` return the events that are due."""

    def __init__(self, model: str, max_tokens: int) -> None:
        self.model, self.max_tokens = model, max_tokens
        self.message_id = f"msg_{uuid.uuid4().hex[:24]}"
        self.num_blocks = 0
        #: The open block's kind ("text" or "tool_use"), and its call's index.
        self.open: str | None = None
        self.call_index: int | None = None
        self.finish: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] = {}
        #: The open thinking block's text (its signature is a digest of it).
        self.thought = ""

    def start(self) -> list[Event]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        """The events of one backend chunk; raises the backend's in-stream error. The
        router's heartbeat while the backend is silent is Anthropic's own `ping` event."""
        if chunk is sse.PING_EVENT:
            return [{"type": "ping"}]
        if "error" in chunk:
            raise backend_error(chunk)
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        out: list[Event] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._thinking(str(delta["reasoning_content"]))
            if delta.get("content"):
                out += self._text(str(delta["content"]))
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])
                matched = choice.get("stop_reason")
                self.stop_sequence = matched if isinstance(matched, str) else None
        return out

    def end(self) -> list[Event]:
        used = usage(self.usage)
        reason = stop_reason(
            self.finish, self.stop_sequence, used["output_tokens"], self.max_tokens
        )
        delta = {
            "stop_reason": reason,
            "stop_sequence": self.stop_sequence if reason == "stop_sequence" else None,
        }
        return [
            *self._close(),
            {"type": "message_delta", "delta": delta, "usage": used},
            {"type": "message_stop"},
        ]

    def _open(self, block: dict[str, Any]) -> list[Event]:
        out = self._close()
        self.open = str(block["type"])
        self.num_blocks += 1
        return [*out, {"type": "content_block_start", "index": self.index, "content_block": block}]

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            sign = {"type": "signature_delta", "signature": signature(self.thought)}
            out.append(self._delta(sign))
            self.thought = ""
        self.open, self.call_index = None, None
        return [*out, {"type": "content_block_stop", "index": self.index}]

    @property
    def index(self) -> int:
        return self.num_blocks - 1

    def _delta(self, delta: dict[str, Any]) -> Event:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _thinking(self, text: str) -> list[Event]:
        block = {"type": "thinking", "thinking": "", "signature": ""}
        out = [] if self.open == "thinking" else self._open(block)
        self.thought += text
        return [*out, self._delta({"type": "thinking_delta", "thinking": text})]

    def _text(self, text: str) -> list[Event]:
        out = [] if self.open == "text" else self._open({"type": "text", "text": ""})
        return [*out, self._delta({"type": "text_delta", "text": text})]

    def _call(self, call: dict[str, Any]) -> list[Event]:
        fn = call.get("function") or {}
        index = call.get("index")
        out: list[Event] = []
        if self.open != "tool_use" or index != self.call_index:
            block = {
                "type": "tool_use",
                "id": str(call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"),
                "name": str(fn.get("name") or ""),
                "input": {},
            }
            out = self._open(block)
            self.call_index = index
        if fn.get("arguments"):
            out.append(self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return out


def fold(events: list[Event]) -> dict[str, Any]:
    """The events of one answer as its `Message` (as the SDK accumulates a stream). A
    tool call whose input is not a whole JSON object (`max_tokens` cut it short, and the
    message says `max_tokens`) is left out, never shown as a call with half its input or
    as text (issue 52)."""
    message: dict[str, Any] = dict(events[0]["message"])
    blocks: list[dict[str, Any] | None] = []
    inputs: dict[int, str] = {}
    for ev in events[1:]:
        kind = ev["type"]
        if kind == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif kind == "content_block_delta":
            delta = ev["delta"]
            block = blocks[ev["index"]]
            if delta["type"] == "text_delta" and block is not None:
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta" and block is not None:
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta" and block is not None:
                block["signature"] = delta["signature"]
            else:
                inputs[ev["index"]] = inputs.get(ev["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            block = blocks[ev["index"]]
            if block is not None and block["type"] == "tool_use":
                blocks[ev["index"]] = _tool_block(block, inputs.get(ev["index"], ""))
        elif kind == "message_delta":
            message.update(ev["delta"], usage=ev["usage"])
    return {**message, "content": [b for b in blocks if b is not None]}


def _tool_block(block: dict[str, Any], arguments: str) -> dict[str, Any] | None:
    """The call with its parsed input; None when its input is not a whole JSON object."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    return {**block, "input": parsed} if isinstance(parsed, dict) else None


def signature(thinking: str) -> str:
    """A thinking block's `signature`: Anthropic's is an opaque proof that the block came
    from the model; Juggler's is a digest of the text (not checked when it comes back)."""
    return hashlib.sha256(thinking.encode()).hexdigest()


# -- the route's side ------------------------------------------------------------------------
async def events_of(
    answer: MessageEvents, chunks: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[Event]:
    for ev in answer.start():
        yield ev
    async for chunk in chunks:
        for ev in answer.feed(chunk):
            yield ev
    for ev in answer.end():
        yield ev


async def sse_events(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """Events as SSE (`event: <type>`); an error ends the stream with an `error` event."""
    try:
        async for ev in events:
            yield sse.event(ev["type"], ev)
    except JugglerError as exc:
        yield sse.event("error", an.error_body(exc))


async def whole(events: AsyncIterator[Event], request: Request) -> dict[str, Any]:
    """The answer as one `Message`; stops early (closing the backend stream, which ends
    the generation) if the client goes away."""
    got: list[Event] = []
    checked = time.monotonic()
    async for ev in events:
        got.append(ev)
        if time.monotonic() - checked > DISCONNECT_POLL_S:
            checked = time.monotonic()
            if await request.is_disconnected():
                break
    return fold(got)
