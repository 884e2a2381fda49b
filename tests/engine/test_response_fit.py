"""Issue 52: `truncation: "auto"` on `/v1/responses` with 8,000 messages took 47 s,
"about 25 s of it rendering and tokenizing while searching for what fits. Bound the
search (tokenize once, drop from the count)". Pure: a template whose count is the sum
of its items' (plus a header), or an uneven one, and a counter of what was rendered."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from juggler.api import media
from juggler.api.openai import ChatMessage
from juggler.api.structured import FunctionCall, ToolCall
from juggler.engine.http.response_fit import fit_turns
from juggler.errors import ContextOverflow


class Template:
    """Counts tokens as a ChatML-like template would: 3 a message around its text's
    tokens (a character each here), 2 for the generation prompt; remembers how many
    items it rendered in all."""

    def __init__(self, extra: dict[int, int] | None = None) -> None:
        self.rendered = 0
        self.calls = 0
        self.extra = extra or {}  # uneven templates: more tokens for some items

    def tokens(self, kept: Sequence[ChatMessage]) -> int:
        self.calls += 1
        self.rendered += len(kept)
        return 2 + sum(3 + len(m.text()) + self.extra.get(id(m), 0) for m in kept)

    @staticmethod
    def cost(m: ChatMessage) -> int:
        return len(m.text())


def longest(turns: Sequence[ChatMessage], t: Template, limit: int) -> list[ChatMessage]:
    """Every suffix tried, newest first, until one more item does not fit."""
    best = None
    for i in range(len(turns) - 1, -1, -1):
        if turns[i].role == "tool":
            continue
        if t.tokens(turns[i:]) > limit:
            break
        best = i
    assert best is not None
    return list(turns[best:])


def conversation(n: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content="w" * (5 + i % 17))
        for i in range(n)
    ]


def test_eight_thousand_messages_are_cut_with_a_few_renders_of_what_can_fit() -> None:
    turns = conversation(8000)
    t = Template()
    kept = fit_turns(turns, t.tokens, 2048, t.cost)
    assert kept == longest(turns, Template(), 2048)
    # Bisecting all 8000 renders about 13 x 4000 items; what can fit is ~130 items.
    assert t.calls <= 4 and t.rendered < 4 * 2048, (t.calls, t.rendered)


def test_an_uneven_template_still_gets_the_longest_suffix_in_few_renders() -> None:
    turns = conversation(3000)
    t = Template({id(m): 9 for m in turns[-200:-50]})  # some items cost more than shown
    kept = fit_turns(turns, t.tokens, 2048, t.cost)
    assert kept == longest(turns, Template({id(m): 9 for m in turns[-200:-50]}), 2048)
    assert t.calls <= 16 and t.rendered < 4 * 2048, (t.calls, t.rendered)


@pytest.mark.parametrize("limit", [10, 20, 25, 35, 60])
def test_the_bounded_search_agrees_with_trying_every_suffix(limit: int) -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}"))
    turns = [
        ChatMessage(role="user", content="u" * 10),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content="t" * 3, tool_call_id="c1"),
        ChatMessage(role="tool", content="t" * 3, tool_call_id="c1"),
        ChatMessage(role="user", content="v" * 5),
    ]
    t = Template()
    if t.tokens(turns[-1:]) > limit:
        with pytest.raises(ContextOverflow):
            fit_turns(turns, t.tokens, limit, t.cost)
        return
    assert fit_turns(turns, t.tokens, limit, t.cost) == longest(turns, t, limit)
    assert fit_turns(turns, t.tokens, limit) == longest(turns, t, limit)


def test_an_image_costs_its_tokens_not_its_urls_characters() -> None:
    """Images are slots in a message's text (`api.media`) whose URL may be a data URL of
    tens of thousands of characters; the model counts an image by its own tokens. The
    bound that cuts what can never fit counted the URL's characters as text, so an
    older item with an image was dropped though it fitted."""
    picture = "data:image/png;base64," + "A" * 40_000

    def tokens(kept: Sequence[ChatMessage]) -> int:  # an image: 50 tokens
        total = 2
        for m in kept:
            text, images = media.without_images(m.text())
            total += 3 + len(text) + 50 * images
        return total

    def cost(m: ChatMessage) -> int:
        text, images = media.without_images(m.text())
        return len(text) + images

    shown = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": picture}},
    ]
    turns = [
        ChatMessage(role="user", content="x" * 500),
        ChatMessage(role="user", content=shown),
        ChatMessage(role="assistant", content="a cat"),
        ChatMessage(role="user", content="and its colour?"),
    ]
    assert media.without_images(turns[1].text()) == ("what is this?", 1)
    kept = fit_turns(turns, tokens, 200, cost)
    assert kept == turns[1:]  # the image's message fits: 3 + 13 + 50 tokens
    assert fit_turns(turns, tokens, 200) == turns[1:]
