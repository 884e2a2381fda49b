"""One choice of a chat answer, assembled from its generation's events: content or tool
calls (parsed by `structured.tool_stream`), log-probabilities, finish reason; as OpenAI's
streamed deltas and as the final message. Also the log-probabilities' OpenAI shapes.

Pure (the token text comes from `piece`, the vocabulary's bytes of a token); the routes
feed it `StreamEvent`s on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from juggler.engine.llama.sampling import TokenLogprob
from juggler.engine.schedule.stream import EventKind, StreamEvent
from juggler.engine.structured.tool_stream import (
    ArgsDelta,
    CallStart,
    Delta,
    TextDelta,
    ToolStream,
)
from juggler.engine.structured.tools import ToolPlan
from juggler.engine.thinking.harmony import HarmonySplitter
from juggler.engine.thinking.split import ThinkingDelta, ThinkSplitter
from juggler.engine.thinking.template import NO_THINK, ThinkPlan

Piece = Callable[[int], bytes]


def _token(piece: Piece, token: int) -> dict[str, Any]:
    raw = piece(token)
    return {"token": raw.decode("utf-8", errors="replace"), "bytes": list(raw)}


def chat_logprobs(entries: Sequence[TokenLogprob], piece: Piece) -> dict[str, Any]:
    """OpenAI chat's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    content = []
    for lp in entries:
        top = [{**_token(piece, t), "logprob": v} for t, v in lp.top]
        content.append({**_token(piece, lp.token), "logprob": lp.logprob, "top_logprobs": top})
    return {"content": content, "refusal": None}


def completion_logprobs(
    entries: Sequence[TokenLogprob], piece: Piece, offset: int = 0
) -> dict[str, Any]:
    """Legacy completions' `logprobs`: tokens, token_logprobs, top_logprobs, text_offset
    (character offsets into the completion's text, from `offset`)."""
    tokens, offsets = [], []
    for lp in entries:
        text = _token(piece, lp.token)["token"]
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [lp.logprob for lp in entries],
        "top_logprobs": [{_token(piece, t)["token"]: v for t, v in lp.top} for lp in entries],
        "text_offset": offsets,
    }


def openai_finish(reason: str | None) -> str:
    """OpenAI knows "stop" and "length"; a cancelled stream reports "stop"."""
    return "length" if reason == "length" else "stop"


def stop_fields(ev: StreamEvent) -> dict[str, Any]:
    """A finished choice's `stop_reason`, as vLLM names it: the stop string that ended it
    (only when one did; the Anthropic dialect reports it as `stop_sequence`)."""
    return {} if ev.stop_sequence is None else {"stop_reason": ev.stop_sequence}


def delta_of(d: Delta) -> dict[str, Any]:
    """A tool-stream delta as a chat chunk's `delta`."""
    if isinstance(d, TextDelta):
        return {"content": d.text}
    if isinstance(d, CallStart):
        fn = {"name": d.name, "arguments": ""}
        call = {"index": d.index, "id": d.call_id, "type": "function", "function": fn}
        return {"tool_calls": [call]}
    assert isinstance(d, ArgsDelta)
    return {"tool_calls": [{"index": d.index, "function": {"arguments": d.text}}]}


@dataclass
class Choice:
    """One choice's output as it arrives; `feed` returns its deltas (a reasoning model's
    thinking as {"reasoning_content": ...}, before the answer's)."""

    index: int
    plan: ToolPlan | None = None
    think: ThinkPlan = NO_THINK
    tools: ToolStream | None = None
    splitter: ThinkSplitter | HarmonySplitter | None = None
    reasoning: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    #: Logprobs not yet sent in a chunk (streaming).
    unsent: list[TokenLogprob] = field(default_factory=list)
    finish: str | None = None

    def __post_init__(self) -> None:
        plan = self.plan
        if plan is not None and plan.is_offered:
            mode: Literal["auto", "calls"] = "auto" if plan.choice == "auto" else "calls"
            self.tools = ToolStream(plan.syntax, mode)
        else:
            self.tools = ToolStream()
        if self.think.reasons and self.think.split:
            harmony = self.think.harmony
            self.splitter = (
                HarmonySplitter() if harmony else ThinkSplitter(inside=self.think.inside)
            )

    def feed(self, ev: StreamEvent) -> list[dict[str, Any]]:
        """The chat deltas of one event ({"content": ...}, {"reasoning_content": ...} or
        {"tool_calls": [...]})."""
        return [
            {"reasoning_content": d.text} if isinstance(d, ThinkingDelta) else delta_of(d)
            for d in self.deltas(ev)
        ]

    def deltas(self, ev: StreamEvent) -> list[Delta | ThinkingDelta]:
        """One event's thinking, text and tool-call deltas (the Responses API's too)."""
        self.logprobs.extend(ev.logprobs)
        self.unsent.extend(ev.logprobs)
        assert self.tools is not None
        if self.splitter is None:
            return list(self.tools.feed(ev.text)) if ev.text else []
        parts = self.splitter.feed(ev.text) if ev.text else []
        if ev.kind is EventKind.DONE:
            parts += self.splitter.flush()
        out: list[Delta | ThinkingDelta] = []
        for kind, text in parts:
            if kind == "reasoning":
                self.reasoning += text
                out.append(ThinkingDelta(text))
            else:
                out += self.tools.feed(text)
        return out

    def take_logprobs(self) -> list[TokenLogprob]:
        out, self.unsent = self.unsent, []
        return out

    @property
    def calls(self) -> list[dict[str, Any]]:
        assert self.tools is not None
        return [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in self.tools.calls
            if c.name
        ]

    @property
    def text(self) -> str:
        assert self.tools is not None
        return self.tools.text

    def finish_reason(self, reason: str | None) -> str:
        """OpenAI's finish_reason: "tool_calls" when the model called tools."""
        assert self.tools is not None
        if reason != "length" and self.tools.complete_calls():
            return "tool_calls"
        return openai_finish(reason)

    def message(self) -> dict[str, Any]:
        calls = self.calls
        thinking = {"reasoning_content": self.reasoning} if self.reasoning else {}
        if calls:
            return {"role": "assistant", "content": None, **thinking, "tool_calls": calls}
        return {"role": "assistant", "content": self.text, **thinking}
