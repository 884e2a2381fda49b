"""The splitter of a reasoning model's output (issue 49: "A reasoning model's thinking
(Qwen3 / DeepSeek-R1 `<think>...</think>`) is returned apart from the answer, streamed and
not"): tags cut across tokens, thinking that never closes, text before `<think>`."""

from __future__ import annotations

import pytest

from juggler.engine.thinking.split import ThinkSplitter, split_all


def streamed(pieces: list[str], *, inside: bool = False) -> tuple[str, str, list[tuple[str, str]]]:
    s = ThinkSplitter(inside=inside)
    parts = [p for piece in pieces for p in s.feed(piece)] + s.flush()
    think = "".join(t for k, t in parts if k == "reasoning")
    answer = "".join(t for k, t in parts if k == "content")
    return think, answer, parts


def test_thinking_then_answer_without_the_whitespace_around_the_tags() -> None:
    assert split_all("<think>\nLet me see.\n</think>\n\nParis.") == ("Let me see.", "Paris.")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_tags_cut_across_tokens_at_every_place(size: int) -> None:
    text = "<think>\nA < B, and </thin is no tag.\n</think>\n\nThe answer </think> stays."
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    think, answer, parts = streamed(pieces)
    assert think == "A < B, and </thin is no tag."
    assert answer == "The answer </think> stays."
    assert all(t for _, t in parts), "no empty deltas"


def test_a_tag_split_across_pieces_is_not_sent_before_it_is_whole() -> None:
    s = ThinkSplitter()
    assert s.feed("<th") == []
    assert s.feed("ink>Hm") == [("reasoning", "Hm")]
    assert s.feed(" ok</th") == [("reasoning", " ok")]
    assert s.feed("ink>") == []
    assert s.feed("\n\nYes") == [("content", "Yes")]


def test_thinking_that_never_closes_is_all_thinking() -> None:
    think, answer, _ = streamed(["<think>\nstep one", "\nstep two</thi"])
    assert (think, answer) == ("step one\nstep two</thi", "")


def test_text_before_think_makes_the_whole_output_the_answer() -> None:
    """As llama.cpp's parser: thinking is recognised only at the start of the output."""
    assert split_all("Sure. <think>no</think> done") == ("", "Sure. <think>no</think> done")
    assert split_all("  \n<think>x</think>y") == ("x", "y"), "whitespace first is fine"


def test_an_answer_without_thinking_is_left_as_it_is() -> None:
    assert split_all("  Hello there") == ("", "  Hello there")
    assert split_all("<thi") == ("", "<thi"), "a tag's start that never finished"
    assert split_all("") == ("", "")


def test_a_prompt_that_opened_the_think_starts_inside_it() -> None:
    """DeepSeek-R1's templates end the generation prompt with `<think>\\n`."""
    assert split_all("\nPlanning.\n</think>\n\n42", inside=True) == ("Planning.", "42")
    think, answer, _ = streamed(
        ["\nPla", "nning.\n", "</", "think>", "\n", "\n4", "2"], inside=True
    )
    assert (think, answer) == ("Planning.", "42")


def test_inner_whitespace_of_the_thinking_is_kept_and_its_tail_is_not() -> None:
    think, _, parts = streamed(["<think>a", "  ", "\n", "b", "\n\n", "</think>c"])
    assert think == "a  \nb"
    assert ("reasoning", "  \nb") in parts


def test_empty_thinking_gives_no_thinking() -> None:
    """Qwen3 with thinking off writes `<think>\\n\\n</think>\\n\\n` (here, in the output)."""
    assert split_all("<think>\n\n</think>\n\nHi") == ("", "Hi")
