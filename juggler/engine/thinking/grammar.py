"""Structured output for the answer, not the thinking: a grammar of the answer
(response_format, json_schema, tools) wrapped so that the thinking may come first.

The thinking is any text without `</think>`, written as a small automaton over the
characters of the tag (each state knows how much of `</think>` it has read), so the
grammar stays unambiguous: the first `</think>` closes the thinking, and from there on the
answer's grammar holds. Its rule `root` is renamed; everything else is left as it is.
"""

from __future__ import annotations

import re

from juggler.engine.thinking.harmony import with_harmony

ANSWER_ROOT = "juggler-answer"

#: After `<think>`: characters up to and including the first `</think>`.
_THINKING = """juggler-t0 ::= [^<] juggler-t0 | "<" juggler-t1
juggler-t1 ::= [^</] juggler-t0 | "<" juggler-t1 | "/" juggler-t2
juggler-t2 ::= [^<t] juggler-t0 | "<" juggler-t1 | "t" juggler-t3
juggler-t3 ::= [^<h] juggler-t0 | "<" juggler-t1 | "h" juggler-t4
juggler-t4 ::= [^<i] juggler-t0 | "<" juggler-t1 | "i" juggler-t5
juggler-t5 ::= [^<n] juggler-t0 | "<" juggler-t1 | "n" juggler-t6
juggler-t6 ::= [^<k] juggler-t0 | "<" juggler-t1 | "k" juggler-t7
juggler-t7 ::= [^<>] juggler-t0 | "<" juggler-t1 | ">"
juggler-gap ::= [ \\t\\r\\n]*"""

# A GBNF token: a string literal, a character class, a comment, or a name.
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*|[A-Za-z0-9_-]+|.', re.S)


def rename_root(grammar: str, name: str = ANSWER_ROOT) -> str:
    """`grammar` with its rule `root` (its definition and every reference) named `name`."""
    return "".join(name if t == "root" else t for t in _TOKEN.findall(grammar))


def with_thinking(grammar: str, *, inside: bool, harmony: bool = False) -> str:
    """The answer's grammar after optional thinking (`<think>` ... `</think>`), or, when
    the prompt opened the `<think>` (`inside`), after the rest of the thinking; for a
    harmony model, in its final channel after an optional analysis message."""
    if harmony:
        return with_harmony(rename_root(grammar), ANSWER_ROOT)
    head = "juggler-t0 juggler-gap" if inside else '("<think>" juggler-t0 juggler-gap)?'
    return f"root ::= {head} {ANSWER_ROOT}\n{_THINKING}\n{rename_root(grammar)}"


def answer_grammar(
    grammar: str | None,
    *,
    raw: bool,
    on: bool,
    inside: bool,
    default: str | None,
    harmony: bool = False,
) -> str | None:
    """A structured output's grammar holds the answer, after the thinking (`on`; for a
    harmony model, in its final channel); a raw GBNF `grammar` (llama-server's: `raw`)
    holds the whole output, as does the model's `--grammar` (`default`) when the request
    gives none."""
    if grammar is None:
        return default
    if raw or not on:
        return grammar
    return with_thinking(grammar, inside=inside, harmony=harmony)
