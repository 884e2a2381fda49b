"""Tool calling, output side: the model's text, fed as it streams, becomes plain text
deltas or tool calls (a call's start with its name, then its arguments piece by piece),
which is exactly what OpenAI's streamed `tool_calls` deltas and the Responses API's
function-call events need. Pure; one `ToolStream` per choice.

The grammar (`tools.tool_grammar`) guarantees the shape, so this is a small scanner, not
a JSON parser: it tracks strings and nesting, and finds the call objects (at nesting 2
in the GENERIC format's `{"tool_calls": [...]}`, at the top in the HERMES format's
`<tool_call>` blocks), their "name" string and the raw text of their "arguments" value.
With tool_choice "auto" the first character decides: the format's opening character
means calls, anything else plain text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from juggler.engine.structured.tools import ToolSyntax


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ArgsDelta:
    index: int
    text: str


Delta = TextDelta | CallStart | ArgsDelta


@dataclass
class ParsedCall:
    call_id: str
    name: str = ""
    arguments: str = ""
    is_complete: bool = False


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class _CallScan:
    """The call object being read: which key the scanner is in, and what it collected."""

    index: int
    key: str = ""
    #: "key" (reading a key string), "colon", "value", "name" (in the name string),
    #: "args" (in the arguments value), "next" (after a value).
    state: str = "next"
    name: str = ""
    held_args: list[str] = field(default_factory=list)
    #: The nesting at which the arguments value started.
    args_depth: int = 0
    args_in_string: bool = False


class ToolStream:
    def __init__(
        self,
        syntax: ToolSyntax = ToolSyntax.GENERIC,
        mode: Literal["auto", "calls", "text"] = "text",
        new_id: Callable[[], str] = new_call_id,
    ) -> None:
        """`mode`: "calls" (tool_choice required or named), "auto", or "text" (no
        tools: everything is plain text)."""
        self.call_depth = 2 if syntax is ToolSyntax.GENERIC else 0
        self.opener = "{" if syntax is ToolSyntax.GENERIC else "<"
        #: None until decided (auto): True for calls, False for plain text.
        self.is_calls: bool | None = {"auto": None, "calls": True, "text": False}[mode]
        self.new_id = new_id
        self.calls: list[ParsedCall] = []
        self.text_parts: list[str] = []
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._scan: _CallScan | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def feed(self, text: str) -> list[Delta]:
        """Deltas for the next piece of output."""
        if self.is_calls is None:
            stripped = text.lstrip()
            if not stripped:
                return []
            self.is_calls = stripped[0] == self.opener
            text = stripped
        if not self.is_calls:
            self.text_parts.append(text)
            return [TextDelta(text)] if text else []
        out: list[Delta] = []
        for ch in text:
            self._char(ch, out)
        return _merged(out)

    def _char(self, ch: str, out: list[Delta]) -> None:
        scan = self._scan
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
            if scan is not None:
                self._string_char(scan, ch, out)
            return
        if ch == '"':
            self._in_string = True
            if scan is not None:
                self._string_open(scan, out)
            return
        if ch in "{[":
            if ch == "{" and scan is None and self._depth == self.call_depth:
                self._scan = _CallScan(len(self.calls))
                self.calls.append(ParsedCall(self.new_id()))
                self._depth += 1
                return
            if scan is not None and scan.state == "value" and scan.key == "arguments":
                scan.state, scan.args_depth = "args", self._depth
            self._depth += 1
            if scan is not None and scan.state == "args":
                self._args(scan, ch, out)
            return
        if ch in "}]":
            self._depth -= 1
            if scan is None:
                return
            if scan.state == "args":
                self._args(scan, ch, out)
                if self._depth == scan.args_depth:
                    scan.state = "next"
                return
            if self._depth == self.call_depth:  # the call object closed
                self.calls[scan.index].is_complete = bool(scan.name)
                self._scan = None
            return
        if scan is None:
            return
        if scan.state == "args":
            if self._depth == scan.args_depth and ch in ",":
                scan.state = "key"
                return
            self._args(scan, ch, out)
        elif scan.state == "colon" and ch == ":":
            scan.state = "value"
        elif scan.state == "value" and not ch.isspace():
            if scan.key == "arguments":  # a scalar value (the grammar allows objects)
                scan.state, scan.args_depth = "args", self._depth
                self._args(scan, ch, out)
        elif scan.state == "next" and ch == ",":
            scan.state = "key"
        elif scan.state == "next" and ch.isspace():
            pass

    def _string_open(self, scan: _CallScan, out: list[Delta]) -> None:
        if scan.state in ("key", "next"):
            scan.state, scan.key = "key", ""
        elif scan.state == "value":
            if scan.key == "name":
                scan.state = "name"
            elif scan.key == "arguments":
                scan.state, scan.args_depth, scan.args_in_string = "args", self._depth, True
                self._args(scan, '"', out)
        elif scan.state == "args":
            self._args(scan, '"', out)

    def _string_char(self, scan: _CallScan, ch: str, out: list[Delta]) -> None:
        closed = not self._in_string
        if scan.state == "key":
            if closed:
                scan.key, scan.state = json.loads(f'"{scan.key}"'), "colon"
            else:
                scan.key += ch
        elif scan.state == "name":
            if closed:
                scan.name = json.loads(f'"{scan.name}"')
                self._start(scan, out)
                scan.state = "next"
            else:
                scan.name += ch
        elif scan.state == "args":
            self._args(scan, ch, out)
            if closed and scan.args_in_string and self._depth == scan.args_depth:
                scan.state, scan.args_in_string = "next", False

    def _start(self, scan: _CallScan, out: list[Delta]) -> None:
        call = self.calls[scan.index]
        call.name = scan.name
        out.append(CallStart(scan.index, call.call_id, scan.name))
        if scan.held_args:
            out.append(ArgsDelta(scan.index, "".join(scan.held_args)))
            scan.held_args.clear()

    def _args(self, scan: _CallScan, ch: str, out: list[Delta]) -> None:
        self.calls[scan.index].arguments += ch
        if scan.name:
            out.append(ArgsDelta(scan.index, ch))
        else:
            scan.held_args.append(ch)

    def complete_calls(self) -> list[ParsedCall]:
        """The calls whose object closed (every call, unless the output was cut)."""
        return [c for c in self.calls if c.is_complete]


def _merged(deltas: list[Delta]) -> list[Delta]:
    """Consecutive argument pieces of one call as one delta."""
    out: list[Delta] = []
    for d in deltas:
        last = out[-1] if out else None
        if isinstance(d, ArgsDelta) and isinstance(last, ArgsDelta) and last.index == d.index:
            out[-1] = ArgsDelta(d.index, last.text + d.text)
        else:
            out.append(d)
    return out
