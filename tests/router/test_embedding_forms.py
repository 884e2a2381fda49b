"""The embeddings request's `input` in OpenAI's four forms (openai's
`types/embedding_create_params.py`: a string, an array of strings, an array of token
ids, an array of arrays of token ids) and the bad ones, validated identically by the
router and the backend. Pure, milliseconds; the vocabulary's upper bound is checked by
the backend (tests/engine/test_embeddings.py) and the real clients in
test_langchain_embeddings.py."""

from __future__ import annotations

from typing import Any

import pytest

from juggler.api.embeddings import MAX_TOKEN_IDS, EmbeddingRequest
from juggler.api.limits import MAX_INPUTS
from juggler.errors import BadRequest
from juggler.router.core.bodies import validate


def inputs(value: Any) -> list[Any]:
    return validate(EmbeddingRequest, {"model": "m", "input": value}).inputs()


def test_the_four_forms_are_one_entry_per_vector() -> None:
    """Issue 24: "Accept all four input forms the OpenAI API defines"."""
    assert inputs("a cat") == ["a cat"]
    assert inputs(["a cat", "a dog"]) == ["a cat", "a dog"]
    assert inputs([101, 7592, 102]) == [[101, 7592, 102]]
    assert inputs([[101, 7592, 102], [101, 102]]) == [[101, 7592, 102], [101, 102]]
    assert inputs([0]) == [[0]]
    assert len(inputs(["x"] * MAX_INPUTS)) == MAX_INPUTS
    assert inputs([5] * MAX_TOKEN_IDS) == [[5] * MAX_TOKEN_IDS]


BAD: list[Any] = [
    [],
    [[]],
    [[101], []],
    ["a", 101],
    [101, "a"],
    [[101], "a"],
    [[101], 102],
    [101, -1],
    [[101, -7]],
    [101, 1.5],
    [[101, 2.0]],
    [True, 101],
    [[False]],
    [None],
    [{"text": "a"}],
    ["x"] * (MAX_INPUTS + 1),
    [7] * (MAX_TOKEN_IDS + 1),
    [[7]] * (MAX_INPUTS + 1),
    [[7] * (MAX_TOKEN_IDS + 1)],
    {"a": 1},
    7,
    None,
]


@pytest.mark.parametrize("value", BAD, ids=lambda v: repr(v)[:40])
def test_bad_inputs_are_a_400_naming_input(value: Any) -> None:
    """Issue 24: bad ones (empty list, mixed types, negative ids, over the existing
    input cap) are refused, naming `input`."""
    with pytest.raises(BadRequest) as err:
        inputs(value)
    assert err.value.status == 400 and err.value.param == "input"
