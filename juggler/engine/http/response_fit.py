"""The Responses API's `truncation: "auto"`: when a conversation does not fit the
model's context, its oldest items are dropped until it does.

OpenAI: "If the input to this Response exceeds the model's context window size, the
model will truncate the response to fit the context window by dropping items from the
beginning of the conversation." The instructions are never dropped, nor the newest
item; a tool result whose call was dropped goes with it. Pure: the token count of a
conversation is given as a function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from juggler.api.openai import ChatMessage
from juggler.errors import ContextOverflow


def _start(turns: Sequence[ChatMessage], first: int) -> int:
    """The first index at or after `first` that does not begin with orphaned tool results."""
    while first < len(turns) - 1 and turns[first].role == "tool":
        first += 1
    return first


def fit_turns(
    turns: Sequence[ChatMessage],
    tokens: Callable[[Sequence[ChatMessage]], int],
    limit: int,
) -> list[ChatMessage]:
    """The longest suffix of `turns` whose prompt (`tokens`) is at most `limit` tokens;
    ContextOverflow when not even the newest item fits."""
    if not turns or tokens(turns) <= limit:
        return list(turns)
    # Fewer turns never make a longer prompt: find the fewest dropped by bisection.
    lo, hi = 1, len(turns) - 1  # `hi` turns dropped leaves the newest only
    last = _start(turns, hi)
    if tokens(turns[last:]) > limit:
        raise ContextOverflow(
            f"input: even its newest item alone needs more than the {limit} tokens the "
            "context holds",
            param="input",
        )
    while lo < hi:
        mid = (lo + hi) // 2
        if tokens(turns[_start(turns, mid) :]) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return list(turns[_start(turns, lo) :])
