"""Issue 49: "structured output applies to the answer, not the thinking". The wrapped
grammar, run by llama.cpp's own grammar engine over SmolLM2's tokens: thinking of any
text may come first, and the first `</think>` hands over to the answer's grammar."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_cpp import llama_cpp as C

from juggler.api.structured import FunctionDef
from juggler.engine.llama.best_k import Candidates as _Candidates
from juggler.engine.llama.native import Model
from juggler.engine.llama.native_sampler import parse_grammar
from juggler.engine.structured.grammar import schema_grammar
from juggler.engine.structured.tools import ToolPlan, ToolSyntax, tool_grammar
from juggler.engine.thinking.grammar import with_thinking

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture(scope="module")
def model(smol_path: Path) -> Model:
    return Model(str(smol_path))


def accepts(model: Model, grammar: str, text: str) -> bool:
    """Whether the grammar lets the model write `text` token by token."""
    g = parse_grammar(model.vocab, grammar)
    try:
        for token in model.tokenize(text, add_special=False, parse_special=False):
            one = _Candidates(np.array([token], dtype=np.int32), np.zeros(1, dtype=np.float32))
            one.apply(g)
            if not np.isfinite(one.view["logit"][0]):
                return False
            C.llama_sampler_accept(g, token)
        return True
    finally:
        C.llama_sampler_free(g)


def test_thinking_of_any_text_then_the_answers_schema(model: Model) -> None:
    g = with_thinking(schema_grammar(SCHEMA, param="response_format"), inside=False)
    assert accepts(model, g, '<think>\nSo {"a": "x"} </thin <b> is not it.\n</think>\n\n{"a": 1}')
    assert accepts(model, g, '{"a": 2}'), "thinking is optional"
    assert not accepts(model, g, '<think>hm</think>\n\n{"a": "x"}'), "the answer holds"
    assert not accepts(model, g, "<think>hm</think> more thinking"), "the first </think> ends it"
    assert not accepts(model, g, 'Sure! {"a": 1}')


def test_a_prompt_that_opened_the_thinking(model: Model) -> None:
    g = with_thinking(schema_grammar(SCHEMA, param="response_format"), inside=True)
    assert accepts(model, g, 'plan</think>\n{"a": 3}')
    assert not accepts(model, g, '<think>plan</think>{"a": "3"}')


def test_tool_calls_after_thinking(model: Model) -> None:
    """ "Tool calls made after thinking still parse": the call's grammar holds after it."""
    weather = FunctionDef(
        name="weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    plan = ToolPlan((weather,), "required", True, ToolSyntax.HERMES)
    g = with_thinking(tool_grammar(plan), inside=False)
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert accepts(model, g, f"<think>\nweather, then.\n</think>\n\n{call}")
    assert not accepts(model, g, "<think>\nhm\n</think>\n\nIt is sunny.")
