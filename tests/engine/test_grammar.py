"""Grammars for constrained sampling: JSON schemas to GBNF, and the guards that keep a
hostile grammar or schema away from llama.cpp's recursive parser."""

from __future__ import annotations

from typing import Any

import pytest

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
    for _ in range(5000):
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
