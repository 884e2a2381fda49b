"""A thinking budget (Anthropic's `thinking.budget_tokens`, Juggler's
`thinking_budget_tokens`): once the model has thought that many tokens without closing
its thinking, the thinking is closed for it (`\\n</think>\\n\\n`, or for a harmony model
`<|end|><|start|>assistant<|channel|>final<|message|>`), token by token as if it had
sampled them, and the answer follows under the request's token limit.

`BudgetSampler` wraps a generation's sampler (`ports.TokenSampler`) and reads the text of
what it samples: the thinking is recognised as the splitter does (at the start of the
output, or from the first token when the prompt opened it), and its tokens are counted
from its opening tag on. A forced token goes through the inner sampler's `accept` (its
grammar and penalties follow it); where the request's grammar does not allow the closing
there, the budget gives way to the grammar (a raw `grammar` holds the whole output).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Protocol

from juggler.engine.thinking.harmony import CHANNEL, END, MESSAGE, START
from juggler.engine.thinking.split import CLOSE, OPEN

#: How the output's thinking is written: "think" (`<think>` at the start), "inside" (the
#: prompt opened it) or "harmony" (gpt-oss's analysis channel).
FORMS = ("think", "inside", "harmony")
_OPENS = {"think": OPEN, "inside": "", "harmony": f"{CHANNEL}analysis{MESSAGE}"}
_CLOSES = {"think": (CLOSE,), "inside": (CLOSE,), "harmony": (END, START, CHANNEL)}
_FORCED = {
    "think": f"\n{CLOSE}\n\n",
    "inside": f"\n{CLOSE}\n\n",
    "harmony": f"{END}{START}assistant{CHANNEL}final{MESSAGE}",
}


class _Inner(Protocol):
    def sample(self, row: int) -> int: ...
    def sample_logits(self, logits: Any) -> int: ...
    def lead(self, row: int, token: int) -> float: ...
    def accept(self, token: int) -> bool: ...
    def close(self) -> None: ...


class _State(enum.Enum):
    START = "start"
    THINK = "think"
    DONE = "done"  # an answer: nothing more to count


class BudgetSampler:
    """`inner` with the thinking closed after `budget` tokens of it."""

    def __init__(
        self,
        inner: _Inner,
        *,
        budget: int,
        form: str,
        piece: Callable[[int], bytes],
        tokenize: Callable[[str], list[int]],
    ) -> None:
        self.inner = inner
        self.budget = budget
        self.form = form
        self.piece = piece
        self.forced = tokenize(_FORCED[form])
        self.state = _State.THINK if form == "inside" else _State.START
        self.text = ""
        self.spent = 0
        #: The closing still to be written, token by token.
        self.queue: list[int] = []

    def sample(self, row: int) -> int:
        forced = self._next()
        return self._seen(self.inner.sample(row)) if forced is None else forced

    def sample_logits(self, logits: Any) -> int:
        forced = self._next()
        return self._seen(self.inner.sample_logits(logits)) if forced is None else forced

    def lead(self, row: int, token: int) -> float:
        return self.inner.lead(row, token)

    def close(self) -> None:
        self.inner.close()

    def _next(self) -> int | None:
        """The next token of a closing under way (None: sample as ever)."""
        if self.state is _State.THINK and self.spent >= self.budget and not self.queue:
            self.queue = list(self.forced)
        while self.queue:
            token = self.queue.pop(0)
            if not self.inner.accept(token):  # the grammar will not have it: let it go
                self.queue = []
                self.state = _State.DONE
                return None
            if not self.queue:
                self.state = _State.DONE
            return token
        return None

    def _seen(self, token: int) -> int:
        if self.state is _State.DONE:
            return token
        self.text += self.piece(token).decode("utf-8", errors="replace")
        if self.state is _State.START:
            lead = self.text.lstrip()
            opener = _OPENS[self.form]
            if lead.startswith(opener):
                self.state, self.text = _State.THINK, lead[len(opener) :]
                self.spent = 0
            elif not opener.startswith(lead):
                self.state = _State.DONE
            return token
        self.spent += 1
        if any(c in self.text for c in _CLOSES[self.form]):
            self.state = _State.DONE
        return token


def think_budget(think: Any, tokens: int | None) -> dict[str, Any]:
    """The SamplingParams fields of a request's budget under its think plan (none when the
    model does not think, or thinking is off)."""
    if tokens is None or not think.reasons or not think.on:
        return {}
    form = "harmony" if think.harmony else "inside" if think.inside else "think"
    return {"think_budget": tokens, "think_form": form}
