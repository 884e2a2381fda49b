"""Stop strings with partial-match holdback, UTF-8 assembly across tokens, logprobs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from juggler.engine.llama.sampling import StopMatcher, Utf8Assembler, token_logprobs


def feed_all(m: StopMatcher, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for p in pieces:
        emit, stopped = m.feed(p)
        out.append(emit)
        if stopped:
            return "".join(out), True
    out.append(m.flush())
    return "".join(out), False


def test_stop_string_split_across_tokens_is_not_emitted() -> None:
    m = StopMatcher(("###",))
    emit, stopped = m.feed("hello #")
    assert (emit, stopped) == ("hello ", False)
    emit, stopped = m.feed("#")
    assert (emit, stopped) == ("", False)
    emit, stopped = m.feed("# tail")
    assert (emit, stopped) == ("", True)
    assert m.is_matched


def test_false_alarm_releases_held_text() -> None:
    assert feed_all(StopMatcher(("END",)), ["a E", "N", "x b"]) == ("a ENx b", False)


def test_earliest_of_several_stops_wins() -> None:
    assert feed_all(StopMatcher(("b", "a")), ["xxab"]) == ("xx", True)


def test_no_stops_passes_through() -> None:
    assert feed_all(StopMatcher(()), ["a", "b"]) == ("ab", False)


def test_held_text_is_flushed_at_the_end() -> None:
    assert feed_all(StopMatcher(("STOP",)), ["hi ST"]) == ("hi ST", False)


def test_utf8_character_split_over_two_tokens() -> None:
    data = "é🙂".encode()
    a = Utf8Assembler()
    assert a.feed(data[:1]) == ""
    assert a.feed(data[1:4]) == "é"
    assert a.feed(data[4:]) == "🙂"
    assert a.flush() == ""


def test_a_character_cut_in_half_at_the_end_is_held_back_not_replaced() -> None:
    """Issue 52: "When `max_tokens` cuts a character in half the text ends in U+FFFD
    [...] Hold incomplete UTF-8 back". Bytes that are never UTF-8 still become U+FFFD."""
    a = Utf8Assembler()
    assert a.feed("🌱".encode()) == "🌱"
    assert a.feed("🌱".encode()[:2]) == ""
    assert a.flush() == ""
    assert a.feed(b"\xffok") == "\ufffdok"
    assert a.flush() == ""


def test_logprobs_are_the_log_softmax_with_the_best_tokens_first() -> None:
    logits = np.array([1.0, 3.0, 2.0, -1.0])
    lp = token_logprobs(logits, 2, 3)
    expected = logits - np.log(np.exp(logits).sum())
    assert lp.token == 2 and lp.logprob == pytest.approx(expected[2])
    assert [t for t, _ in lp.top] == [1, 2, 0]
    assert [v for _, v in lp.top] == pytest.approx([expected[1], expected[2], expected[0]])
    assert sum(math.exp(v) for _, v in token_logprobs(logits, 0, 4).top) == pytest.approx(1.0)
    assert token_logprobs(logits, 1, 0).top == ()
