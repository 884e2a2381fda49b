"""Issue 49: "structured output applies to the answer, not the thinking", for gpt-oss's
harmony format: the wrapped grammar, run by llama.cpp's grammar engine over a copy of
SmolLM2 whose vocabulary has the harmony markers as control tokens, lets an analysis
message come first and holds the final channel to the schema."""

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
from juggler.engine.thinking.grammar import answer_grammar
from tests.harmony_copy import FORCED, harmony_copy

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.fixture(scope="module")
def model(smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Model:
    return Model(str(harmony_copy(smol_path, tmp_path_factory.mktemp("h") / "oss.gguf")))


def accepts(model: Model, grammar: str, text: str) -> bool:
    """Whether the grammar lets the model write `text` (markers as their tokens)."""
    g = parse_grammar(model.vocab, grammar)
    try:
        for token in model.tokenize(text, add_special=False, parse_special=True):
            one = _Candidates(np.array([token], dtype=np.int32), np.zeros(1, dtype=np.float32))
            one.apply(g)
            if not np.isfinite(one.view["logit"][0]):
                return False
            C.llama_sampler_accept(g, token)
        return True
    finally:
        C.llama_sampler_free(g)


def test_the_markers_are_tokens_that_render_as_text(model: Model) -> None:
    """llama.cpp renders `<|start|>`, `<|channel|>`, `<|message|>` (and here `<|end|>`) as
    text, and `<|return|>` / `<|call|>` end the generation, as for gpt-oss itself."""
    ids = model.tokenize("<|channel|><|message|><|end|><|start|>", add_special=False)
    assert ids == [4, 5, 6, 3]
    assert b"".join(model.piece(t) for t in ids) == b"<|channel|><|message|><|end|><|start|>"
    assert model.is_eog(7) and model.is_eog(8) and not model.is_eog(6)
    assert model.piece(7) == b""


def test_analysis_then_the_schema_in_the_final_channel(model: Model) -> None:
    schema = schema_grammar(SCHEMA, param="response_format")
    g = answer_grammar(schema, raw=False, on=True, inside=False, default=None, harmony=True)
    assert g is not None
    final = '<|channel|>final<|message|>{"a": 1}'
    think = "<|channel|>analysis<|message|>So {x} <|start|> maybe.<|end|><|start|>assistant"
    assert accepts(model, g, think + final)
    assert accepts(model, g, final), "the analysis is optional"
    assert not accepts(model, g, '<|channel|>final<|message|>{"a": "x"}'), "the answer holds"
    assert not accepts(model, g, '{"a": 1}'), "the answer is in the final channel"
    assert not accepts(model, g, "<|channel|>analysis<|message|>hm<|end|>{}")


def test_the_tests_forcing_grammar_parses(model: Model) -> None:
    out = (
        "<|channel|>analysis<|message|>think it<|end|><|start|>assistant"
        "<|channel|>final<|message|>It is Paris."
    )
    assert accepts(model, FORCED, out)
    assert not accepts(model, FORCED, "It is Paris.")


def test_tool_calls_after_the_analysis(model: Model) -> None:
    """ "Tool calls made after thinking still parse": Juggler's tool-call format holds the
    final channel after the analysis."""
    weather = FunctionDef(
        name="weather",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    plan = ToolPlan((weather,), "required", True, ToolSyntax.HERMES)
    g = answer_grammar(
        tool_grammar(plan), raw=False, on=True, inside=False, default=None, harmony=True
    )
    assert g is not None
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    think = "<|channel|>analysis<|message|>weather, then.<|end|><|start|>assistant"
    assert accepts(model, g, f"{think}<|channel|>final<|message|>{call}")
    assert not accepts(model, g, f"{think}<|channel|>final<|message|>It is sunny.")
