"""The Responses API's shapes: the response object, its output items, its usage, and
the stream's events (`response.created` ... `response.completed`), each numbered.

`OutputItems` turns one choice's deltas (plain text, or tool calls as they stream:
`structured.tool_stream`) into output items and the events that build them: a message
item with one output_text part, or one function_call item per call. Pure.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Sequence
from typing import Any

from juggler.api import sse
from juggler.api.responses import ResponsesRequest
from juggler.engine.http.response_reasoning import ReasoningItem, reasoning_done
from juggler.engine.schedule.stream import RequestStats
from juggler.engine.structured.tool_stream import ArgsDelta, CallStart, Delta, TextDelta
from juggler.engine.thinking.split import ThinkingDelta


def item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(stats: RequestStats | None) -> dict[str, Any]:
    s = stats or RequestStats()
    return {
        "input_tokens": s.input_tokens,
        "input_tokens_details": {"cached_tokens": s.prompt_tokens_reused},
        "output_tokens": s.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": s.input_tokens + s.output_tokens,
    }


def response_object(
    rid: str,
    model: str,
    body: ResponsesRequest,
    *,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    stats: RequestStats | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    fmt = body.text.format if body.text is not None else None
    return {
        "id": rid,
        "object": "response",
        "created_at": created_at,
        "completed_at": int(time.time()) if status == "completed" else None,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage(stats) if stats is not None else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "text": {
            "format": fmt.model_dump(by_alias=True, exclude_none=True)
            if fmt is not None
            else {"type": "text"},
            "verbosity": "medium",
        },
        "tool_choice": body.tool_choice.model_dump()
        if body.tool_choice is not None and not isinstance(body.tool_choice, str)
        else body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "truncation": body.truncation or "disabled",
        "store": body.store,
        "user": body.user,
        "background": False,
        "service_tier": "default",
        "reasoning": {"effort": None, "summary": None},
        "top_logprobs": body.top_logprobs,
        "max_tool_calls": body.max_tool_calls,
        "prompt_cache_key": body.prompt_cache_key,
        "prompt_cache_retention": body.prompt_cache_retention,
        "safety_identifier": body.safety_identifier,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class OutputItems:
    """One response's output items as its deltas arrive; every method returns the
    stream events (dicts with their type) that go with what changed."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._text: int | None = None
        self._calls: dict[int, int] = {}
        #: Log-probabilities of tokens whose text has not come out yet.
        self._logprobs: list[dict[str, Any]] = []
        self._thinking = ReasoningItem()

    def add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        return self._add(item)

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.items.append(item)
        index = len(self.items) - 1
        return [{"type": "response.output_item.added", "output_index": index, "item": dict(item)}]

    def _open_text(self) -> list[dict[str, Any]]:
        if self._text is not None:
            return []
        item: dict[str, Any] = {
            "id": item_id("msg"),
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        events = self._add(item)
        self._text = len(self.items) - 1
        item["content"].append(_text_part(""))
        events.append(
            {
                "type": "response.content_part.added",
                "item_id": item["id"],
                "output_index": self._text,
                "content_index": 0,
                "part": _text_part(""),
            }
        )
        return events

    def feed(
        self, deltas: Sequence[Delta | ThinkingDelta], logprobs: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """`logprobs`: those of the tokens these deltas came from (OpenAI's shape); they
        go with the next text delta, and into the output text part."""
        events: list[dict[str, Any]] = []
        self._logprobs += logprobs or []
        for d in deltas:
            if isinstance(d, ThinkingDelta):
                events += self._thinking.feed(self, d.text)
            elif isinstance(d, TextDelta):
                events += self._open_text()
                assert self._text is not None
                item = self.items[self._text]
                part = item["content"][0]
                part["text"] += d.text
                lps, self._logprobs = self._logprobs, []
                part["logprobs"] += lps
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": self._text,
                        "content_index": 0,
                        "delta": d.text,
                        "logprobs": lps,
                    }
                )
            elif isinstance(d, CallStart):
                call = {
                    "id": item_id("fc"),
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": d.call_id,
                    "name": d.name,
                    "arguments": "",
                }
                events += self._add(call)
                self._calls[d.index] = len(self.items) - 1
            else:
                assert isinstance(d, ArgsDelta)
                at = self._calls[d.index]
                self.items[at]["arguments"] += d.text
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": self.items[at]["id"],
                        "output_index": at,
                        "delta": d.text,
                    }
                )
        return events

    def close(self, status: str = "completed") -> list[dict[str, Any]]:
        """Finish every item (an answer with no output gets an empty message)."""
        events: list[dict[str, Any]] = []
        if not self.items:
            events += self._open_text()
        for index, item in enumerate(self.items):
            item["status"] = status
            if item["type"] == "reasoning":
                events += reasoning_done(item, index)
            elif item["type"] == "message":
                part = item["content"][0]
                part["logprobs"] += self._logprobs
                self._logprobs = []
                common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events.append(
                    {
                        "type": "response.output_text.done",
                        **common,
                        "text": part["text"],
                        "logprobs": part["logprobs"],
                    }
                )
                events.append({"type": "response.content_part.done", **common, "part": part})
            else:
                events.append(
                    {
                        "type": "response.function_call_arguments.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "name": item["name"],
                        "arguments": item["arguments"],
                    }
                )
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
        return events


class EventNumbers:
    """SSE framing of Responses events, numbered in order (`sequence_number`). With
    `obfuscate` (stream_options.include_obfuscation), each delta event carries an
    `obfuscation` string of random length, so that its size does not tell its text's."""

    def __init__(self, obfuscate: bool = False) -> None:
        self.next = 0
        self.obfuscate = obfuscate

    def frame(self, event: dict[str, Any]) -> bytes:
        out = {**event, "sequence_number": self.next}
        if self.obfuscate and str(event["type"]).endswith(".delta"):
            out["obfuscation"] = secrets.token_urlsafe(12)[: secrets.randbelow(16) + 1]
        self.next += 1
        return sse.event(str(event["type"]), out)
