"""gpt-oss's harmony channels (issue 49: "A reasoning model's thinking (... gpt-oss's
harmony channels) is returned apart from the answer"): the analysis channel is the
thinking, the final channel the answer; its template is a reasoning template; its effort
is the template's `reasoning_effort`, and it cannot stop thinking."""

from __future__ import annotations

import pytest

from juggler.engine.llama.chat import ChatTemplate
from juggler.engine.thinking.harmony import HarmonySplitter, channel_of, harmony_messages
from juggler.engine.thinking.template import think_caps, think_plan
from juggler.reasoning import template_harmony, template_reasons
from tests.harmony_copy import TEMPLATE

OUT = (
    "<|channel|>analysis<|message|>The user asks. Answer: Paris.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is Paris."
)
OSS = ChatTemplate(TEMPLATE, bos_token="", eos_token="", origin="gguf")


def split(pieces: list[str]) -> tuple[str, str]:
    s = HarmonySplitter()
    parts = [p for piece in pieces for p in s.feed(piece)] + s.flush()
    assert all(text for _, text in parts), parts
    return (
        "".join(t for k, t in parts if k == "reasoning"),
        "".join(t for k, t in parts if k == "content"),
    )


WANT = ("The user asks. Answer: Paris.", "It is Paris.")


def test_the_analysis_channel_is_the_thinking_and_final_the_answer() -> None:
    assert split([OUT]) == WANT


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_markers_cut_across_pieces(size: int) -> None:
    assert split([OUT[i : i + size] for i in range(0, len(OUT), size)]) == WANT


def test_a_message_ends_where_the_next_begins_when_end_is_not_rendered() -> None:
    """`<|end|>` is a control token: where it renders empty, the next header ends the
    analysis."""
    assert split([OUT.replace("<|end|>", "")]) == WANT
    bare = "<|channel|>analysis<|message|>hm<|channel|>final<|message|>It is Paris."
    assert split([bare]) == ("hm", "It is Paris.")


def test_commentary_is_answer_text_and_its_header_is_dropped() -> None:
    out = (
        "<|channel|>analysis<|message|>call it<|end|>"
        '<|start|>assistant to=functions.weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    )
    assert split([out]) == ("call it", '{"city": "Paris"}')
    assert channel_of("assistant to=functions.w<|channel|>commentary <|constrain|>json") == (
        "commentary"
    )


def test_unclosed_thinking_and_output_without_channels() -> None:
    assert split(["<|channel|>analysis<|message|>still thinking  "]) == ("still thinking", "")
    assert split(["It is Paris."]) == ("", "It is Paris.")
    assert split(["  <|chan", "nel|>final<|message|>ok"]) == ("", "ok")
    assert split(["  "]) == ("", "")


def test_two_analysis_messages_are_one_thinking() -> None:
    out = (
        "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis"
        "<|message|>two<|end|><|start|>assistant<|channel|>final<|message|>ok"
    )
    assert split([out]) == ("one\ntwo", "ok")


def test_the_harmony_template_reasons() -> None:
    assert template_harmony(TEMPLATE) and template_reasons(TEMPLATE)
    assert not template_harmony("{{ '<think>' }}")
    caps = think_caps(OSS)
    assert caps.reasons and caps.harmony and not caps.toggle


@pytest.mark.parametrize(
    ("kwargs", "effort", "want"),
    [
        (None, None, "medium"),
        (None, "high", "high"),
        (None, "low", "low"),
        (None, "none", "low"),
        (None, "minimal", "low"),
        ({"enable_thinking": False}, None, "low"),
        ({"enable_thinking": True}, None, "medium"),
    ],
)
def test_effort_reaches_the_template_and_off_is_low(
    kwargs: dict[str, bool] | None, effort: str | None, want: str
) -> None:
    """gpt-oss takes `reasoning_effort` low/medium/high and cannot stop thinking: off asks
    for the least."""
    plan = think_plan(think_caps(OSS), "oss", kwargs=kwargs, effort=effort)  # type: ignore[arg-type]
    assert plan.on and plan.harmony and plan.suffix == ""
    prompt = OSS.render(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, variables=plan.variables
    )
    assert f"Reasoning: {want}\n" in prompt and prompt.endswith("<|start|>assistant")


def test_earlier_turns_thinking_reaches_the_template_as_thinking() -> None:
    turns = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "look it up",
            "tool_calls": [{"function": {"name": "w", "arguments": "{}"}}],
        },
    ]
    prompt = OSS.render(harmony_messages(turns), add_generation_prompt=True)
    assert "<|channel|>analysis<|message|>look it up<|end|>" in prompt
    assert "to=functions.w<|channel|>commentary json<|message|>{}<|call|>" in prompt
