"""The model's output, as it streams, split into thinking and answer (pure).

A reasoning model writes `<think>` thinking `</think>` and then its answer (Qwen3,
DeepSeek-R1, QwQ, SmolLM3 ...); some templates open the `<think>` in the prompt, so the
output starts inside the thinking (`inside=True`). As llama.cpp's parser does, thinking is
recognised only at the start of the output (after whitespace): a `<think>` later in the
answer is answer text. A tag cut across tokens is held back until it is whole; thinking
that never closes (the token limit came first) is all thinking. The whitespace around
the thinking (`<think>\\n`, `\\n</think>\\n\\n`) belongs to neither part.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

OPEN = "<think>"
CLOSE = "</think>"

Kind = Literal["reasoning", "content"]
Part = tuple[Kind, str]


@dataclass(frozen=True)
class ThinkingDelta:
    """A piece of a reasoning model's thinking, as the answer's deltas go out."""

    text: str


class _State(enum.Enum):
    START = "start"  # nothing but whitespace yet: `<think>` may come
    THINK = "think"
    AFTER = "after"  # the thinking closed: whitespace before the answer is dropped
    ANSWER = "answer"


def partial_tail(text: str, tag: str) -> int:
    """How many of the last characters of `text` are a proper prefix of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ThinkingText:
    """Thinking told as it arrives (both splitters): whitespace before the first of it is
    dropped, and whitespace at its end is sent only if more thinking follows."""

    def __init__(self) -> None:
        #: Whitespace at the end of the thinking so far.
        self.spaces = ""
        #: No thinking sent yet.
        self.fresh = True

    def add(self, text: str, out: list[Part], *, final: bool) -> None:
        if self.fresh:
            text = text.lstrip()
            if not text:
                return
        body = text.rstrip()
        if body:
            out.append(("reasoning", self.spaces + body))
            self.fresh = False
            self.spaces = ""
        if not final:
            self.spaces += text[len(body) :]


class ThinkSplitter:
    """Feed it the output's text as it arrives; it returns the parts it can tell."""

    def __init__(self, *, inside: bool = False) -> None:
        self.state = _State.THINK if inside else _State.START
        #: Text not yet told: the start of the output, or a tag's first characters.
        self.held = ""
        self.thinking = ThinkingText()

    def feed(self, text: str) -> list[Part]:
        out: list[Part] = []
        text = self.held + text
        self.held = ""
        while text:
            if self.state is _State.START:
                lead = text.lstrip()
                if lead.startswith(OPEN):
                    self.state, text = _State.THINK, lead[len(OPEN) :]
                elif OPEN.startswith(lead):  # whitespace, or the tag's first characters
                    self.held = text
                    return out
                else:
                    self.state = _State.ANSWER
            elif self.state is _State.THINK:
                end = text.find(CLOSE)
                if end >= 0:
                    self.thinking.add(text[:end], out, final=True)
                    self.state, text = _State.AFTER, text[end + len(CLOSE) :]
                    continue
                cut = partial_tail(text, CLOSE)
                self.thinking.add(text[: len(text) - cut], out, final=False)
                self.held = text[len(text) - cut :]
                return out
            elif self.state is _State.AFTER:
                text = text.lstrip()
                if text:
                    self.state = _State.ANSWER
            else:
                out.append(("content", text))
                return out
        return out

    def flush(self) -> list[Part]:
        """The end of the output: what was held back is told as it stands."""
        held, self.held = self.held, ""
        if not held:
            return []
        if self.state is _State.THINK:
            out: list[Part] = []
            self.thinking.add(held, out, final=True)
            return out
        if self.state is _State.START and held.strip():
            return [("content", held)]
        return []


def split_all(text: str, *, inside: bool = False) -> tuple[str, str]:
    """A whole output's (thinking, answer)."""
    s = ThinkSplitter(inside=inside)
    parts = [*s.feed(text), *s.flush()]
    return (
        "".join(t for k, t in parts if k == "reasoning"),
        "".join(t for k, t in parts if k == "content"),
    )
