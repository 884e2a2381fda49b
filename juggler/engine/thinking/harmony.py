"""gpt-oss's harmony format: its output is messages on channels,
`<|channel|>analysis<|message|>THINKING<|end|><|start|>assistant<|channel|>final<|message|>
ANSWER<|return|>`, told apart as thinking (the `analysis` channel) and answer (`final`,
and `commentary`: harmony's tool calls and preambles are answer text, not parsed). Pure.

The markers are special tokens. llama.cpp renders `<|start|>`, `<|channel|>`,
`<|message|>` and `<|constrain|>` as text (it marks them user-defined for gpt-oss), while
`<|end|>` is a control token that renders empty and `<|return|>` / `<|call|>` end the
generation: so a message ends at `<|end|>`, `<|return|>` or `<|call|>` where they are
seen, and otherwise where the next message's `<|start|>` or `<|channel|>` begins. A marker
cut across tokens is held back until it is whole. Output that does not start with a
message header (after whitespace) is all answer, as the `<think>` splitter treats output
without `<think>`.
"""

from __future__ import annotations

import enum
from typing import Any

from juggler.engine.thinking.split import Part, ThinkingText, partial_tail

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, RETURN, CALL, CONSTRAIN = "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"
#: What ends a message's body: its own end, or the next message's header.
BOUNDS = (END, RETURN, CALL, START, CHANNEL)
HEADS = (START, CHANNEL)
MARKERS = (START, CHANNEL, MESSAGE, END, RETURN, CALL, CONSTRAIN)
THINKING_CHANNEL = "analysis"


class _State(enum.Enum):
    FIRST = "first"  # nothing but whitespace yet: a header may come
    HEADER = "header"  # a message's header, up to `<|message|>`
    BODY = "body"
    PLAIN = "plain"  # the output is not harmony: all answer


def _held(text: str) -> int:
    """How many of the last characters of `text` may begin a marker."""
    return max(partial_tail(text, m) for m in MARKERS)


def channel_of(header: str) -> str:
    """A header's channel (`<|channel|>analysis`, `<|channel|>commentary to=...`)."""
    at = header.rfind(CHANNEL)
    if at < 0:
        return ""
    rest = header[at + len(CHANNEL) :]
    return rest.split("<|", 1)[0].split(" ", 1)[0].strip()


class HarmonySplitter:
    """Feed it the output's text as it arrives; it returns the parts it can tell."""

    def __init__(self) -> None:
        self.state = _State.FIRST
        self.held = ""
        self.header = ""
        self.kind: Any = "content"
        self.thinking = ThinkingText()

    def feed(self, text: str) -> list[Part]:
        out: list[Part] = []
        text = self.held + text
        self.held = ""
        while text:
            if self.state is _State.FIRST:
                lead = text.lstrip()
                if lead.startswith(HEADS):
                    self.state, text = _State.HEADER, lead
                elif any(h.startswith(lead) for h in HEADS):
                    self.held = text
                    return out
                else:
                    self.state = _State.PLAIN
            elif self.state is _State.HEADER:
                at = text.find(MESSAGE)
                if at < 0:
                    cut = partial_tail(text, MESSAGE)
                    self.header += text[: len(text) - cut]
                    self.held = text[len(text) - cut :]
                    return out
                self.header += text[:at]
                channel = channel_of(self.header)
                self.kind = "reasoning" if channel == THINKING_CHANNEL else "content"
                self.state, self.header, text = _State.BODY, "", text[at + len(MESSAGE) :]
            elif self.state is _State.BODY:
                ends = [(i, b) for b in BOUNDS if (i := text.find(b)) >= 0]
                if ends:
                    at, bound = min(ends)
                    self._body(text[:at], out, final=True)
                    self.state = _State.HEADER
                    text = text[at:] if bound in HEADS else text[at + len(bound) :]
                    continue
                cut = _held(text)
                self._body(text[: len(text) - cut], out, final=False)
                self.held = text[len(text) - cut :]
                return out
            else:
                out.append(("content", text))
                return out
        return out

    def _body(self, text: str, out: list[Part], *, final: bool) -> None:
        if self.kind == "content":
            if text:
                out.append(("content", text))
            return
        self.thinking.add(text, out, final=final)
        if final and not self.thinking.fresh:  # the next analysis message: a new line
            self.thinking.spaces = "\n"

    def flush(self) -> list[Part]:
        """The end of the output: what was held back is told as it stands."""
        held, self.held = self.held, ""
        out: list[Part] = []
        if self.state is _State.BODY and held:
            self._body(held, out, final=True)
        elif self.state is _State.FIRST and held.strip():
            out.append(("content", held))
        return out


def harmony_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier turns' thinking as gpt-oss's template reads it: an assistant message's
    `thinking` (Juggler's messages carry it as `reasoning_content`)."""
    return [
        {**m, "thinking": m["reasoning_content"]}
        if m.get("reasoning_content") is not None and "thinking" not in m
        else m
        for m in messages
    ]


def with_harmony(answer: str, root: str) -> str:
    """The answer's grammar (`answer`, its root rule named `root`) in harmony's final
    channel, after an optional analysis message (any tokens but `<|end|>`)."""
    thinking = '<|channel|> "analysis" <|message|> juggler-h* <|end|> <|start|> "assistant"'
    return (
        f'root ::= ({thinking})? <|channel|> "final" <|message|> {root}\n'
        f"juggler-h ::= !<|end|>\n{answer}"
    )
