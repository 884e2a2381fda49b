"""Grammars for constrained sampling: JSON schemas to GBNF, and the guards that keep a
hostile grammar or schema away from llama.cpp's recursive parser."""

from __future__ import annotations

from typing import Any

import pytest

from juggler.engine.structured.ambiguity import MAX_NULLABLE_REPEAT
from juggler.engine.structured.grammar import (
    MAX_REPEAT,
    guard,
    json_object_grammar,
    schema_grammar,
)
from juggler.errors import BadRequest


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.splitlines())


def test_a_schema_becomes_a_grammar_with_a_root_rule_in_property_order() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    r = rules(schema_grammar(schema, param="response_format"))
    assert r["root"] == '"{" space name-kv "," space age-kv "}" space'
    assert r["space"] == '" "?', "at most one space between tokens, so output always ends"


def test_json_object_mode_allows_any_object_only() -> None:
    r = rules(json_object_grammar())
    assert r["root"] == "object"
    assert r["object"].startswith('"{"')


def test_local_refs_are_followed_and_remote_ones_refused() -> None:
    schema = {
        "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/pt"}},
        "required": ["a"],
    }
    assert "pt" in rules(schema_grammar(schema, param="p"))
    remote = {"$ref": "https://example.com/schema.json"}
    with pytest.raises(BadRequest, match="only local") as err:
        schema_grammar(remote, param="response_format.json_schema.schema")
    assert err.value.param == "response_format.json_schema.schema"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {}, "minItems": MAX_REPEAT + 1},
        {"type": "string", "maxLength": 10**9},
        {"type": "string", "pattern": "a{0,100000}"},
        {"type": "no-such-type"},
        ["not", "an", "object"],
    ],
)
def test_schemas_that_cannot_be_used_are_a_400_naming_the_field(schema: Any) -> None:
    with pytest.raises(BadRequest) as err:
        schema_grammar(schema, param="json_schema")
    assert err.value.status == 400 and err.value.param == "json_schema"


def test_a_deeply_nested_schema_is_refused_not_a_crash() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(4000):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(BadRequest, match="json_schema"):
        schema_grammar(deep, param="json_schema")


def test_grammars_that_would_crash_the_parser_are_refused() -> None:
    assert guard('root ::= "a" ("b" | [()] "c")', param="grammar")
    with pytest.raises(BadRequest, match="nested"):
        guard("root ::= " + "(" * 3000 + '"a"' + ")" * 3000, param="grammar")
    with pytest.raises(BadRequest, match="repetition"):
        guard('root ::= "a"{0,5000}', param="grammar")
    with pytest.raises(BadRequest, match="longer"):
        guard("root ::= " + '"a" ' * 20000, param="grammar")
    with pytest.raises(BadRequest, match="empty"):
        guard("  ", param="grammar")


def test_parentheses_inside_literals_classes_and_comments_do_not_count() -> None:
    literal = 'root ::= "' + "(" * 3000 + '"\n'
    klass = "root ::= [" + "(" * 3000 + "]\n"
    comment = "# " + "(" * 3000 + '\nroot ::= "x"'
    for grammar in (literal, klass, comment):
        assert guard(grammar, param="grammar") == grammar


EXPLOSIVE_PATTERNS = [
    "^(a|aa|aaa|a?){1,1000}(b|c)*$",  # issue 27's pattern
    "(a{0,5}){1,50}",
    "(?:x?y*){10,}",
    "^((a)|(b?)){9}$",
]
CHEAP_PATTERNS = [
    "^(a|aa|aaa){1,1000}$",  # ambiguous, but each copy takes a character
    "^(a?)*$",  # unbounded: one recursive rule
    "^(a?){1,8}$",
    "^[a-z]{1,1000}$",
    r"^\d{3}-\d{4}$",
    "^(a?b){1,100}$",
    r"^[\w.+-]+@[\w-]+\.[\w.]+$",
]


@pytest.mark.parametrize("pattern", EXPLOSIVE_PATTERNS)
def test_a_pattern_that_repeats_an_empty_match_many_times_is_refused(pattern: str) -> None:
    """Issue 27: "patterns and grammars compiled under a budget (repetition and size
    limits, a time limit; a 400 that names the limit)". Measured on SmolLM2's vocabulary:
    `(a?){1,200}` takes 71 s for one token in a single llama.cpp call."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    with pytest.raises(BadRequest, match="can match the empty string") as got:
        schema_grammar(schema, param="response_format")
    assert got.value.code == "grammar_too_complex"
    assert got.value.param == "response_format"
    assert str(MAX_NULLABLE_REPEAT) in str(got.value)


@pytest.mark.parametrize("pattern", CHEAP_PATTERNS)
def test_patterns_that_stay_cheap_are_accepted(pattern: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    assert "root ::=" in schema_grammar(schema, param="response_format")


def test_a_client_grammar_repeating_an_empty_rule_is_refused_through_its_rules() -> None:
    with pytest.raises(BadRequest, match="empty string") as got:
        guard('root ::= x{1,100}\nx ::= y | "b"\ny ::= "a"?', param="grammar")
    assert got.value.code == "grammar_too_complex"
    with pytest.raises(BadRequest, match="empty string"):
        guard('root ::= (""){1,20}', param="grammar")
    assert guard('root ::= ("a" "b"?){1,100}', param="grammar")
    assert guard('root ::= ("a"?)*', param="grammar")


def test_the_ambiguity_check_survives_hostile_nesting_and_long_rule_chains() -> None:
    chain = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(4000))
    assert guard(chain + 'r4000 ::= "a"\n', param="grammar")
    with pytest.raises(BadRequest, match="empty string"):
        guard(chain.replace("root ::= r0", "root ::= r0{2,40}") + 'r4000 ::= ""\n', param="g")
    deep = "root ::= " + "(" * 1500 + '"a"?' + ")" * 1500 + "{1,20}"
    with pytest.raises(BadRequest, match="empty string"):
        guard(deep, param="grammar")


def test_a_character_past_the_bmp_in_a_schema_literal_is_one_code_point() -> None:
    """Issue 52 (found testing it): llama-cpp-python's converter wrote 🌱 in an `enum`
    as JSON's two surrogates, which llama.cpp sampled as six bytes of invalid UTF-8 (a
    client saw "���"). A literal backslash before `u` stays as it was."""
    grammar = schema_grammar({"type": "string", "enum": ["🌱", "a\\ud83c\\udf31"]}, param="x")
    assert "\\U0001f331" in grammar and "\\ud83c\\udf31" not in grammar.replace("\\\\", "")
    assert "a\\\\ud83c\\\\udf31" in grammar
