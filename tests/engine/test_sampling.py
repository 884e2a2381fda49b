"""Stop strings with partial-match holdback, UTF-8 assembly across tokens."""

from __future__ import annotations

from juggler.engine.llama.sampling import StopMatcher, Utf8Assembler


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
