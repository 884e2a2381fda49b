"""Grammars for constrained sampling: JSON schemas to GBNF, and the guards every grammar
passes before llama.cpp parses it.

Pure functions (llama-cpp-python's JSON-schema converter is pure Python). A schema or
grammar that cannot be used is the client's error: `BadRequest` naming `param`.

Request bodies are hostile, and llama.cpp's grammar parser recurses: a grammar nested
thousands of parentheses deep crashes the backend process (measured: 20,000 levels do).
So a client's GBNF text is bounded in size, nesting and repetition counts, a JSON schema
in its repetition counts (the converter spells `maxItems: N` out N times), and only
local `$ref`s ("#/...") are followed: nothing is ever fetched.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from typing import Any

from llama_cpp import llama_grammar

from juggler.engine.structured.ambiguity import check_gbnf, check_pattern
from juggler.errors import BadRequest

#: Longest GBNF text a client may send (`grammar`).
MAX_GRAMMAR_CHARS = 64 * 1024
#: Longest grammar made from a schema or tools.
MAX_BUILT_GRAMMAR_CHARS = 1024 * 1024
#: Deepest parenthesis nesting of any grammar given to llama.cpp.
MAX_NESTING = 2000
#: Largest repetition count: `{m,n}` in GBNF or a pattern, min/max items and lengths.
MAX_REPEAT = 1000
_COUNT_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties")
_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
#: llama-cpp-python's converter (untyped).
SchemaConverter = Any
_CONVERTER: Any = llama_grammar.SchemaConverter


def _nesting(grammar: str) -> int:
    """The deepest parenthesis nesting outside literals, character classes and comments."""
    depth = deepest = 0
    i, n = 0, len(grammar)
    while i < n:
        c = grammar[i]
        if c in '"[':
            end = '"' if c == '"' else "]"
            i += 1
            while i < n and grammar[i] != end:
                i += 2 if grammar[i] == "\\" else 1
        elif c == "#":
            while i < n and grammar[i] != "\n":
                i += 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
        i += 1
    return deepest


def _check_counts(text: str, param: str) -> None:
    for m in _REPEAT.finditer(text):
        for num in m.groups():
            if num and int(num) > MAX_REPEAT:
                raise BadRequest(
                    f"{param}: a repetition count of {num} is more than {MAX_REPEAT}",
                    param=param,
                )


def guard(
    grammar: str, *, param: str, max_chars: int = MAX_GRAMMAR_CHARS, client: bool = True
) -> str:
    """`grammar` if llama.cpp can safely be asked to parse it, else BadRequest. A
    client's own text is also checked for the ambiguous repetitions of `ambiguity` (a
    grammar built here from a schema had its patterns checked instead)."""
    if not grammar.strip():
        raise BadRequest(f"{param}: the grammar is empty", param=param)
    if len(grammar) > max_chars:
        raise BadRequest(f"{param}: longer than {max_chars} characters", param=param)
    if _nesting(grammar) > MAX_NESTING:
        raise BadRequest(f"{param}: nested more than {MAX_NESTING} levels deep", param=param)
    _check_counts(grammar, param)
    if client:
        check_gbnf(grammar, param=param)
    return grammar


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            for k, v in n.items():
                yield str(k), v
                stack.append(v)
        elif isinstance(n, list):
            stack.extend(n)


def _check_schema(schema: Any, param: str) -> None:
    if not isinstance(schema, dict):
        raise BadRequest(f"{param}: a JSON schema must be an object", param=param)
    for key, value in _walk(schema):
        if key == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
            raise BadRequest(
                f"{param}: only local $ref values ('#/...') are supported, not {value!r}",
                param=param,
            )
        if key in _COUNT_KEYS and isinstance(value, int) and value > MAX_REPEAT:
            raise BadRequest(f"{param}: {key} {value} is more than {MAX_REPEAT}", param=param)
        if key == "pattern" and isinstance(value, str):
            _check_counts(value, param)
            check_pattern(value, param=param)


def converter() -> SchemaConverter:
    return _CONVERTER(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def visit_schema(conv: SchemaConverter, schema: Any, name: str, *, param: str) -> str:
    """Add the rules of `schema` to `conv` (as rule `name`, "" for root); returns the
    rule's name. BadRequest when the converter cannot handle the schema."""
    _check_schema(schema, param)
    try:
        doc = conv.resolve_refs(copy.deepcopy(schema), f"{param}:{name}")
        return str(conv.visit(doc, name))
    except RecursionError:
        raise BadRequest(f"{param}: the JSON schema is nested too deeply", param=param) from None
    except Exception as exc:  # the converter asserts and raises freely on odd schemas
        raise BadRequest(
            f"{param}: this JSON schema cannot be turned into a grammar: {exc}", param=param
        ) from None


#: A UTF-16 surrogate pair as the converter escapes a character past U+FFFF.
_SURROGATES = re.compile(
    r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})", re.IGNORECASE
)


def _whole_characters(grammar: str) -> str:
    """The converter writes a literal's characters past U+FFFF (an emoji in an `enum`)
    as JSON does, two `\\u` surrogates, which llama.cpp reads as two code points and
    samples as invalid UTF-8 (each a U+FFFD for the client, issue 52): one `\\U`."""

    def one(m: re.Match[str]) -> str:
        high, low = int(m[2], 16), int(m[3], 16)
        return f"{m[1]}\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"

    return _SURROGATES.sub(one, grammar)


def finish(conv: SchemaConverter, *, param: str, extra: str = "") -> str:
    """The converter's rules (plus `extra` rules) as one guarded grammar."""
    grammar = _whole_characters(conv.format_grammar()) + (f"\n{extra}" if extra else "")
    return guard(grammar, param=param, max_chars=MAX_BUILT_GRAMMAR_CHARS, client=False)


def schema_grammar(schema: Any, *, param: str) -> str:
    """GBNF for one JSON value that matches `schema` (compact JSON: at most a single
    space between tokens, so the output always ends)."""
    conv = converter()
    visit_schema(conv, schema, "", param=param)
    return finish(conv, param=param)


@functools.cache
def json_object_grammar() -> str:
    """Any JSON object (response_format json_object)."""
    return schema_grammar({"type": "object"}, param="response_format")
