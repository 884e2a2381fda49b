"""A thinking budget (Anthropic's `thinking.budget_tokens`: "Determines how many tokens
Claude can use for its internal reasoning process"): once the model has thought that
many tokens, its thinking is closed for it, token by token through the sampler's
`accept`, and it samples the answer as ever. The text is read as the splitter reads it."""

from __future__ import annotations

from typing import Any

from juggler.engine.thinking.budget import BudgetSampler, think_budget
from juggler.engine.thinking.template import NO_THINK, ThinkPlan

#: A vocabulary of whole words and tags: each token is one of these strings.
WORDS = [
    "<think>",
    "</think>",
    "\n",
    "hm",
    " ",
    "Paris",
    "<|channel|>",
    "analysis",
    "<|message|>",
    "<|end|>",
    "<|start|>",
    "assistant",
    "final",
]


def tok(text: str) -> list[int]:
    """Greedy longest-match tokenizing over WORDS."""
    out = []
    while text:
        word = max((w for w in WORDS if text.startswith(w)), key=len)
        out.append(WORDS.index(word))
        text = text[len(word) :]
    return out


class Scripted:
    """An inner sampler that draws the tokens of `text` in turn, then "Paris" forever (at
    once, once a closing was forced on it: the model answers)."""

    def __init__(self, text: str, refuse: bool = False) -> None:
        self.draws = tok(text)
        self.accepted: list[int] = []
        self.refuse = refuse

    def sample(self, row: int) -> int:
        return self.draws.pop(0) if self.draws else WORDS.index("Paris")

    def sample_logits(self, logits: Any) -> int:
        return self.sample(0)

    def lead(self, row: int, token: int) -> float:
        return 0.0

    def accept(self, token: int) -> bool:
        if self.refuse:
            return False
        self.accepted.append(token)
        self.draws = []
        return True

    def close(self) -> None:
        pass


def run(inner: Scripted, budget: int, form: str, n: int = 16) -> str:
    s = BudgetSampler(
        inner, budget=budget, form=form, piece=lambda t: WORDS[t].encode(), tokenize=tok
    )
    return "".join(WORDS[s.sample(0)] for _ in range(n))


THINKING = "<think>\n" + "hm " * 20


def test_the_thinking_is_closed_after_the_budget() -> None:
    inner = Scripted(THINKING)
    out = run(inner, budget=4, form="think", n=14)
    assert out == "<think>\nhm hm\n</think>\n\n" + "Paris" * 5
    assert inner.accepted == tok("\n</think>\n\n"), "the grammar and penalties follow"


def test_thinking_that_closes_in_time_is_left_alone() -> None:
    inner = Scripted("<think>\nhm\n</think>\n\n")
    assert run(inner, budget=4, form="think", n=9) == "<think>\nhm\n</think>\n\nParisParis"
    assert inner.accepted == []


def test_an_answer_without_thinking_is_never_cut() -> None:
    assert run(Scripted("Paris"), budget=0, form="think", n=3) == "ParisParisParis"


def test_a_prompt_that_opened_the_thinking_and_the_harmony_channel() -> None:
    assert run(Scripted("hm " * 9), budget=2, form="inside", n=7) == "hm \n</think>\n\nParis"
    harmony = run(Scripted("<|channel|>analysis<|message|>" + "hm " * 9), budget=2, form="harmony")
    assert harmony.startswith(
        "<|channel|>analysis<|message|>hm <|end|><|start|>assistant<|channel|>final<|message|>Paris"
    )


def test_a_grammar_that_refuses_the_closing_holds() -> None:
    assert run(Scripted(THINKING, refuse=True), budget=2, form="think", n=6) == "<think>\nhm hm "


def test_the_budget_applies_only_to_thinking_that_is_on() -> None:
    on = ThinkPlan(reasons=True, on=True, inside=True)
    assert think_budget(on, 1024) == {"think_budget": 1024, "think_form": "inside"}
    assert think_budget(ThinkPlan(reasons=True, on=True, harmony=True), 8)["think_form"] == (
        "harmony"
    )
    assert think_budget(ThinkPlan(reasons=True, on=False), 1024) == {}
    assert think_budget(NO_THINK, 1024) == think_budget(on, None) == {}
