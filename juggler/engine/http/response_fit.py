"""The Responses API's `truncation: "auto"`: when a conversation does not fit the
model's context, its oldest items are dropped until it does.

OpenAI: "If the input to this Response exceeds the model's context window size, the
model will truncate the response to fit the context window by dropping items from the
beginning of the conversation." The instructions are never dropped, nor the newest
item; a tool result whose call was dropped goes with it. Pure: the token count of a
conversation is given as a function (`tokens`, which renders and tokenizes: the costly
step), and so is a cheap count of one item's own tokens (`cost`).

Issue 52: the search is bounded ("8,000 messages (13.8 MB): 200 in 47 s, about 25 s of
it rendering and tokenizing while searching"). (1) Items that cannot be kept whatever
the template does are cut first, with no rendering: walking back from the newest, once
even a lower bound of their tokens (one an item, one per `MAX_CHARS_PER_TOKEN`
characters) passes the limit. (2) What is left is rendered and tokenized once; each
item's share of that count is its own tokens plus an even share of the template's
(`cost`), and the oldest items are dropped from the count until it fits. (3) The cut
is checked exactly (it fits, and one item more does not), stepping an item at a time
when the template is not that even, and bisecting after `MAX_STEPS` steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from juggler.api import media
from juggler.api.embeddings import MAX_CHARS_PER_TOKEN
from juggler.api.openai import ChatMessage
from juggler.errors import ContextOverflow

#: Exact checks a step at a time before the search bisects what is left.
MAX_STEPS = 4

Count = Callable[[Sequence[ChatMessage]], int]


def _start(turns: Sequence[ChatMessage], first: int) -> int:
    """The first index at or after `first` that does not begin with orphaned tool results."""
    while first < len(turns) - 1 and turns[first].role == "tool":
        first += 1
    return first


def min_tokens(item: ChatMessage) -> int:
    """A lower bound on the tokens an item takes in any prompt: one, one per image (not
    its URL's characters), and its text at `MAX_CHARS_PER_TOKEN`."""
    text, images = media.without_images(item.text())
    chars = len(text) + sum(
        len(c.function.name) + len(c.function.arguments) for c in item.tool_calls or ()
    )
    return 1 + images + chars // MAX_CHARS_PER_TOKEN


def _never_fit(turns: Sequence[ChatMessage], limit: int) -> int:
    """The index before which no item can be kept: a lower bound of the tokens from it
    to the newest item already passes `limit` (step 1)."""
    total = 0
    for i in range(len(turns) - 1, 0, -1):
        total += min_tokens(turns[i])
        if total > limit:
            return i + 1
    return 0


def fit_turns(
    turns: Sequence[ChatMessage],
    tokens: Count,
    limit: int,
    cost: Callable[[ChatMessage], int] | None = None,
) -> list[ChatMessage]:
    """The longest suffix of `turns` whose prompt (`tokens`) is at most `limit` tokens;
    ContextOverflow when not even the newest item fits. `cost`: an item's own tokens
    (None: the search bisects)."""
    if not turns:
        return []
    last = _start(turns, len(turns) - 1)
    first = _start(turns, min(_never_fit(turns, limit), last))
    n = tokens(turns[first:])
    if n <= limit:
        return list(turns[first:])
    if first == last or tokens(turns[last:]) > limit:
        raise ContextOverflow(
            f"input: even its newest item alone needs more than the {limit} tokens the "
            "context holds",
            param="input",
        )
    # `hi` is a start known to fit, `lo` one known not to: the answer is in (lo, hi].
    lo, hi = first, last
    if cost is not None:
        guess = _guess(turns, first, n, limit, cost)
        lo, hi = _steps(turns, tokens, limit, guess, lo, hi)
    while _start(turns, lo + 1) < hi:
        mid = _start(turns, (lo + hi) // 2)
        if not lo < mid < hi:
            mid = _start(turns, lo + 1)
        if tokens(turns[mid:]) <= limit:
            hi = mid
        else:
            lo = mid
    return list(turns[hi:])


def _guess(
    turns: Sequence[ChatMessage],
    first: int,
    n: int,
    limit: int,
    cost: Callable[[ChatMessage], int],
) -> int:
    """Where the prompt of `n` tokens (`turns[first:]`) fits, dropping each oldest item's
    share of the count: its own tokens and an even share of the template's (step 2)."""
    own = [cost(t) for t in turns[first:]]
    share = max(0, n - sum(own)) / len(own)
    excess: float = n - limit
    i = first
    while excess > 0 and i < len(turns) - 1:
        excess -= own[i - first] + share
        i += 1
    return _start(turns, i)


def _steps(
    turns: Sequence[ChatMessage], tokens: Count, limit: int, guess: int, lo: int, hi: int
) -> tuple[int, int]:
    """Narrow (lo, hi] from `guess` by exact counts, an item at a time (step 3)."""
    at = max(_start(turns, lo + 1), min(guess, hi))
    for _ in range(MAX_STEPS):
        if at >= hi or at <= lo:
            break
        if tokens(turns[at:]) <= limit:
            hi = at
            at = _previous(turns, at, lo)
        else:
            lo = at
            at = _start(turns, at + 1)
        if _start(turns, lo + 1) >= hi:
            break
    return lo, hi


def _previous(turns: Sequence[ChatMessage], at: int, lo: int) -> int:
    """The start of the suffix one item longer than `turns[at:]` (past `lo`: `lo`)."""
    i = at - 1
    while i > lo and _start(turns, i) != i:
        i -= 1
    return max(i, lo)
