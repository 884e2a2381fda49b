"""A thinking budget, live (issue 49's Anthropic `thinking` request field: `budget_tokens`
"Determines how many tokens Claude can use for its internal reasoning process"; the
Anthropic dialect sends it to the backend as `thinking_budget_tokens`, which
`test_thinking_dialects` pins). A copy of SmolLM2 with Qwen3's template whose grammar
lets it think any length (`<think>\\n[a-z ]+\\n</think>\\n\\nIt is ....`), and a
logit bias against the newlines that would begin its `</think>`: unbudgeted, its thinking
runs to the token limit; with a budget, Juggler closes the thinking after that many
tokens and the model answers. Through the `openai` client. (Anthropic's least budget,
1024 tokens, is too long a thinking for the CPU test run, and its API has no logit bias.)"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import pytest
from openai import OpenAI

from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import resolve_checkpoint
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.gguf_copy import copy_gguf

pytestmark = pytest.mark.slow

QWEN3 = (Path(__file__).parent.parent / "fixtures" / "qwen3.jinja").read_text()
MODEL = "extra.endless-smol"
ENDLESS = 'root ::= "<think>\\n" [a-z ]+ "\\n</think>\\n\\nIt is " [A-Z] [a-z]{2,10} "."'
ASK = [{"role": "user", "content": "What is the capital of France?"}]


def closing_tokens(path: Path) -> dict[str, int]:
    """A bias against every token that could begin the `</think>` after thinking of
    `[a-z ]+`: those of letters and spaces ending in a newline (GPT-2's byte letters: `Ġ`
    a space, `Ċ` a newline)."""
    tokens = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"].contents()
    return {str(i): -100 for i, t in enumerate(tokens) if re.fullmatch("[a-zĠ]*Ċ", t)}


NO_CLOSE: dict[str, int] = {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("models")
    smol = resolve_checkpoint(Registry().get(DEFAULT_MODEL))
    copy_gguf(smol, folder / "endless-smol.gguf", strings={"tokenizer.chat_template": QWEN3})
    NO_CLOSE.update(closing_tokens(smol))
    assert 0 < len(NO_CLOSE) < 50
    env = {"JUGGLER_MODEL_DIRS": str(folder)}
    srv = start_server(tmp_path_factory.mktemp("tb"), "--model", "", "--ctx-size", "4096", env=env)
    try:
        with srv.client(timeout=300) as c:
            args = f"--grammar {shlex.quote(ENDLESS)}"
            r = c.post("/api/v1/load", json={"model_name": MODEL, "llamacpp_args": args})
            assert r.status_code == 200, r.text
        yield srv
    finally:
        srv.stop()


def chat(server: RunningServer, **extra: Any) -> Any:
    with OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0) as client:
        return client.chat.completions.create(
            model=MODEL,
            messages=ASK,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=48,
            logit_bias=NO_CLOSE,
            extra_body=extra,
        )


def test_the_budget_closes_the_thinking_and_the_answer_follows(server: RunningServer) -> None:
    endless = chat(server)
    message: Any = endless.choices[0].message
    assert endless.choices[0].finish_reason == "length" and not message.content
    assert len(message.reasoning_content) > 20, "unbudgeted, it thinks to the limit"
    budgeted = chat(server, thinking_budget_tokens=6)
    message = budgeted.choices[0].message
    assert budgeted.choices[0].finish_reason == "stop", message
    assert message.content.startswith("It is ") and message.content.endswith(".")
    usage = budgeted.usage.completion_tokens_details
    assert 1 <= usage.reasoning_tokens <= 6
    assert endless.choices[0].message.reasoning_content.startswith(message.reasoning_content)
