"""A copy of SmolLM2 that speaks gpt-oss's harmony format (issue 49): its vocabulary has
the harmony markers as control tokens (in place of seven unused StarCoder tokens, ids 3-9)
and its chat template is a condensed gpt-oss template (`fixtures/gpt-oss.jinja`). No
model that was trained on harmony is small enough for the tests; a grammar forces the
output into the format."""

from __future__ import annotations

from pathlib import Path

from tests.gguf_copy import copy_gguf

#: The harmony markers, at the ids of tokens SmolLM2 never writes (their type, control, kept).
MARKERS = {
    3: "<|start|>",
    4: "<|channel|>",
    5: "<|message|>",
    6: "<|end|>",
    7: "<|return|>",
    8: "<|call|>",
    9: "<|constrain|>",
}
TEMPLATE = (Path(__file__).parent / "fixtures" / "gpt-oss.jinja").read_text()
#: The model's whole output: an analysis message, then the final answer, as gpt-oss writes.
FORCED = (
    'root ::= <|channel|> "analysis" <|message|> [a-z] [a-z ]{3,23} <|end|> '
    '<|start|> "assistant" <|channel|> "final" <|message|> "It is " [A-Z] [a-z]{2,10} "." '
    "<|return|>"
)


def harmony_copy(smol: Path, dest: Path) -> Path:
    copy_gguf(smol, dest, strings={"tokenizer.chat_template": TEMPLATE}, tokens=MARKERS)
    return dest
