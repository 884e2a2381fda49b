"""`juggler run`'s parts that need no server: multi-line input, /set options, the
generate body and the answer's figures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from juggler.cli.chat import Answer, generate_body, parse_option, read_message


def reader(*lines: str) -> tuple[Callable[[str], str], list[str]]:
    prompts: list[str] = []
    feed = iter(lines)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(feed)

    return read, prompts


def test_a_plain_line_is_one_message() -> None:
    read, prompts = reader("hello there")
    assert read_message(read) == "hello there"
    assert prompts == [">>> "]


def test_triple_quotes_open_a_message_of_several_lines() -> None:
    read, prompts = reader('"""first line', "", "  second", 'last"""')
    assert read_message(read) == "first line\n\n  second\nlast"
    assert prompts == [">>> ", "... ", "... ", "... "]


def test_triple_quotes_on_one_line_and_alone() -> None:
    assert read_message(reader('"""just this"""')[0]) == "just this"
    read, prompts = reader('"""', "a", '"""')
    assert read_message(read) == "a"
    assert len(prompts) == 3


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("temperature", "0.2", 0.2),
        ("top_k", "40", 40),
        ("seed", "-1", -1),
        ("ignore_eos", "on", True),
        ("ignore_eos", "false", False),
        ("stop", "END  ###", ["END", "###"]),
    ],
)
def test_set_reads_each_option_with_its_type(name: str, value: str, expected: object) -> None:
    assert parse_option(name, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("temprature", "1", "unknown option 'temprature'"),
        ("top_k", "4.5", "top_k must be an integer"),
        ("temperature", "hot", "temperature must be a number"),
        ("temperature", " ", "needs a value"),
        ("ignore_eos", "maybe", "true or false"),
    ],
)
def test_set_refuses_what_it_cannot_read(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_option(name, value)


def test_max_tokens_goes_to_the_session_api_as_max_new_tokens() -> None:
    assert generate_body({"max_tokens": 8, "temperature": 0.0}) == {
        "max_new_tokens": 8,
        "temperature": 0.0,
    }


def test_tokens_per_second_counts_from_the_first_text() -> None:
    answer = Answer(usage={"completion_tokens": 11}, first_text_s=0.5, total_s=2.5)
    assert answer.tokens_per_s() == 5.0
    assert (
        Answer(usage={"completion_tokens": 1}, first_text_s=0.5, total_s=1).tokens_per_s() is None
    )
