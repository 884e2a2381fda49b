"""Chat templates: incremental rendering of deltas and fallbacks by architecture."""

from __future__ import annotations

import logging

import pytest

from juggler.engine.llama.chat import CHATML, GEMMA, ChatState, ChatTemplate


def tpl(source: str = CHATML) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<bos>", eos_token="<eos>", origin="test")


def test_turn_delta_is_only_the_new_turn() -> None:
    t = tpl()
    state = ChatState()
    first = state.delta_for(t, [{"role": "user", "content": "hi"}])
    assert first == "<|im_start|>user\nhi<|im_end|>\n"
    state.text += first
    state.messages.append({"role": "user", "content": "hi"})
    prompt = t.generation_prompt(state.messages)
    assert prompt == "<|im_start|>assistant\n"
    state.text += prompt + "hello"
    state.messages.append({"role": "assistant", "content": "hello"})
    delta = state.delta_for(t, [{"role": "user", "content": "again"}])
    assert delta == "<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"


def test_template_that_rewrites_history_reports_no_delta() -> None:
    source = "{{ messages | length }}:{% for m in messages %}{{ m.content }}{% endfor %}"
    t = tpl(source)
    state = ChatState(messages=[{"role": "user", "content": "a"}], text="1:a")
    assert state.delta_for(t, [{"role": "user", "content": "b"}]) is None


def test_missing_template_falls_back_by_architecture(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        t = ChatTemplate.choose(None, "gemma3", bos_token="<bos>", eos_token="<eos>")
    assert t.origin == "gemma3 fallback"
    assert "gemma3 fallback" in caplog.text
    text = t.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert text == tpl(GEMMA).render(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert ChatTemplate.choose(None, "weird", bos_token="", eos_token="").origin == "chatml"


def test_gguf_template_is_preferred() -> None:
    t = ChatTemplate.choose("X{{ messages[0].content }}", "gemma3", bos_token="", eos_token="")
    assert t.origin == "gguf"
    assert t.render([{"role": "user", "content": "y"}], add_generation_prompt=False) == "Xy"
