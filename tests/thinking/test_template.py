"""What a chat template does with thinking, and how a request turns it on or off (issue
49: "Turning thinking off (`think: false`, `reasoning_effort`, Qwen3's `enable_thinking`)
reaches the chat template the way the model expects. Earlier turns' thinking is handled
as the template wants (dropped or kept).")."""

from __future__ import annotations

from pathlib import Path

import pytest

from juggler.api.openai import ChatMessage
from juggler.engine.llama.chat import CHATML, ChatTemplate
from juggler.engine.structured.tools import ToolCaps, chat_messages, template_caps
from juggler.engine.thinking.grammar import rename_root, with_thinking
from juggler.engine.thinking.template import (
    ThinkCaps,
    request_plan,
    template_reasons,
    think_caps,
    think_plan,
)
from juggler.errors import BadRequest

FIXTURES = Path(__file__).parent.parent / "fixtures"


def template(name: str) -> ChatTemplate:
    source = (FIXTURES / name).read_text()
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>", origin="gguf")


QWEN3 = template("qwen3.jinja")
R1 = template("deepseek_r1.jinja")
PLAIN = ChatTemplate(CHATML, bos_token="", eos_token="", origin="chatml")
USER = [{"role": "user", "content": "hi"}]
#: DeepSeek's assistant header (its bars are U+FF5C).
R1_TURN = "<\uff5cAssistant\uff5c>"


def test_reasoning_is_read_from_the_template() -> None:
    assert think_caps(QWEN3) == ThinkCaps(reasons=True, toggle=True, opens=False)
    assert think_caps(R1) == ThinkCaps(reasons=True, toggle=False, opens=True)
    assert think_caps(PLAIN) == ThinkCaps()
    assert template_caps(QWEN3).think.reasons and template_caps(QWEN3).hermes
    assert template_reasons("{{ '<|channel|>' }}<think>") is True
    harmony = template_of("{{ '<|channel|>analysis' }} {{ '<|channel|>final' }}")
    assert think_caps(harmony) == ThinkCaps(reasons=True, harmony=True)


def template_of(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="", eos_token="", origin="gguf")


def prompt(t: ChatTemplate, **kw: object) -> str:
    plan = think_plan(think_caps(t), "m", **kw)  # type: ignore[arg-type]
    return t.render(USER, add_generation_prompt=True, variables=plan.variables) + plan.suffix


def test_qwen3_turns_thinking_off_through_enable_thinking() -> None:
    assert prompt(QWEN3).endswith("<|im_start|>assistant\n")
    off = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert prompt(QWEN3, kwargs={"enable_thinking": False}).endswith(off)
    assert prompt(QWEN3, effort="none").endswith(off)
    assert prompt(QWEN3, effort="high").endswith("<|im_start|>assistant\n")
    assert prompt(QWEN3, default=False).endswith(off), "--reasoning-budget 0"
    assert prompt(QWEN3, default=False, effort="low").endswith("assistant\n"), "asked on"
    assert think_plan(think_caps(QWEN3), "m", effort="none").on is False


def test_a_template_without_enable_thinking_gets_an_empty_thinking_after_its_prompt() -> None:
    assert prompt(R1).endswith(f"{R1_TURN}<think>\n")
    assert prompt(R1, effort="none").endswith(f"{R1_TURN}<think>\n\n</think>\n\n")
    plan = think_plan(think_caps(R1), "m")
    assert plan.on and plan.inside


def test_thinking_asked_of_a_model_that_cannot_think_is_ollamas_400() -> None:
    for kw, param in (
        ({"effort": "high"}, "reasoning_effort"),
        ({"kwargs": {"enable_thinking": True}}, "chat_template_kwargs.enable_thinking"),
    ):
        with pytest.raises(BadRequest, match='"tiny" does not support thinking') as err:
            think_plan(ThinkCaps(), "tiny", **kw)  # type: ignore[arg-type]
        assert err.value.param == param
    assert think_plan(ThinkCaps(), "tiny", effort="none").reasons is False
    assert think_plan(ThinkCaps(), "tiny").variables == {}


def test_bad_template_kwargs_are_400s_naming_them() -> None:
    with pytest.raises(BadRequest) as err:
        think_plan(think_caps(QWEN3), "m", kwargs={"enable_thinking": "no"})
    assert err.value.param == "chat_template_kwargs.enable_thinking"
    with pytest.raises(BadRequest) as err:
        think_plan(think_caps(QWEN3), "m", kwargs={"messages": []})
    assert err.value.param == "chat_template_kwargs.messages"


def test_reasoning_format_none_leaves_the_thinking_in_the_content() -> None:
    caps = think_caps(QWEN3)
    assert request_plan(caps, "m", budget=-1, fmt="none", kwargs=None, effort=None).split is False
    plan = request_plan(
        caps, "m", budget=-1, fmt="none", kwargs=None, effort=None, request_fmt="auto"
    )
    assert plan.split is True


def test_earlier_thinking_reaches_the_template_which_drops_it_before_the_last_question() -> None:
    msgs = [
        ChatMessage(role="user", content="q1"),
        ChatMessage(role="assistant", content="a1", reasoning_content="old thoughts"),
        ChatMessage(role="user", content="q2"),
    ]
    rendered, _ = chat_messages(msgs, None, ToolCaps(hermes=True))
    assert rendered[1]["reasoning_content"] == "old thoughts"
    text = QWEN3.render(rendered, add_generation_prompt=True)
    assert "old thoughts" not in text and "a1" in text
    # ... and keeps it after the last question (a tool loop in progress).
    loop = [*msgs, ChatMessage(role="assistant", content="", reasoning_content="new thoughts")]
    rendered, _ = chat_messages(loop, None, ToolCaps(hermes=True))
    assert "<think>\nnew thoughts\n</think>" in QWEN3.render(rendered, add_generation_prompt=False)


def test_reasoning_content_belongs_to_assistant_messages() -> None:
    with pytest.raises(ValueError, match="assistant"):
        ChatMessage(role="user", content="x", reasoning_content="y")


def test_the_answer_grammar_is_renamed_and_follows_the_thinking() -> None:
    assert rename_root('root ::= "root" x # root\nx ::= [root] root') == (
        'juggler-answer ::= "root" x # root\nx ::= [root] juggler-answer'
    )
    g = with_thinking('root ::= "{}"', inside=False)
    assert g.startswith('root ::= ("<think>" juggler-t0 juggler-gap)? juggler-answer\n')
    assert with_thinking('root ::= "{}"', inside=True).startswith(
        "root ::= juggler-t0 juggler-gap juggler-answer\n"
    )
