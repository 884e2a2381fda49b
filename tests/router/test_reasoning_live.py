"""Issue 49 part 1 through a real router, real backends and the published clients: a
copy of SmolLM2 carrying Qwen3's chat template (written with the `gguf` package; no
reasoning model small enough is packaged) reasons as Qwen3 does, its output forced by the
model's `--grammar` into `<think>...</think>answer`, so the plumbing is proven end to end:
"A reasoning model's thinking ... is returned apart from the answer, streamed and not,
as each API defines it"; "Turning thinking off ... reaches the chat template the way the
model expects"; a model that cannot think says so as Ollama does."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from openai import OpenAI

from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import resolve_checkpoint
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.gguf_copy import copy_gguf

pytestmark = pytest.mark.slow

QWEN3 = (Path(__file__).parent.parent / "fixtures" / "qwen3.jinja").read_text()
MODEL = "extra.qwen3-smol"
PLAIN = "extra.plain-smol"
#: What the model must write: thinking, then an answer.
FORCED = 'root ::= "<think>\\n" [a-z ]{4,24} "\\n</think>\\n\\nIt is " [A-Z] [a-z]{2,10} "."'
ASK = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "max_tokens": 64}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("models")
    smol = resolve_checkpoint(Registry().get(DEFAULT_MODEL))
    copy_gguf(smol, folder / "qwen3-smol.gguf", strings={"tokenizer.chat_template": QWEN3})
    copy_gguf(smol, folder / "plain-smol.gguf")
    env = {"JUGGLER_MODEL_DIRS": str(folder)}
    srv = start_server(tmp_path_factory.mktemp("rs"), "--model", "", "--ctx-size", "1024", env=env)
    try:
        with srv.client(timeout=300) as c:
            args = f"--grammar {shlex.quote(FORCED)}"
            r = c.post("/api/v1/load", json={"model_name": MODEL, "llamacpp_args": args})
            assert r.status_code == 200, r.text
        yield srv
    finally:
        srv.stop()


def gpt(server: RunningServer) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


def split(thinking: str, answer: str) -> None:
    assert 4 <= len(thinking) <= 24 and "<" not in thinking and thinking == thinking.strip()
    assert answer.startswith("It is ") and answer.endswith(".") and "think>" not in answer


def test_listings_label_a_reasoning_template(server: RunningServer) -> None:
    with server.client() as c:
        models = {m["id"]: m for m in c.get("/api/v1/models").json()["data"]}
        shown = c.post("/api/show", json={"model": "qwen3-smol"}).json()
        plain = c.post("/api/show", json={"model": "plain-smol"}).json()
    assert "reasoning" in models[MODEL]["labels"]
    assert "reasoning" not in models[PLAIN]["labels"]
    assert "thinking" in shown["capabilities"] and "thinking" not in plain["capabilities"]


def test_openai_reasoning_content_whole_and_streamed(server: RunningServer) -> None:
    with gpt(server) as client:
        whole = client.chat.completions.create(model=MODEL, messages=ASK, **GREEDY)  # type: ignore[arg-type]
        message: Any = whole.choices[0].message
        split(message.reasoning_content, message.content)
        assert whole.usage is not None and whole.usage.completion_tokens_details is not None
        spent = whole.usage.completion_tokens_details.reasoning_tokens
        assert spent is not None and 0 < spent < whole.usage.completion_tokens
        thinking, answer = "", ""
        stream = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            stream=True,
            stream_options={"include_usage": True},
            **GREEDY,  # type: ignore[arg-type]
        )
        for chunk in stream:
            if chunk.choices:
                delta: Any = chunk.choices[0].delta
                thinking += getattr(delta, "reasoning_content", None) or ""
                answer += delta.content or ""
            elif chunk.usage is not None:
                assert chunk.usage.completion_tokens_details is not None
                assert chunk.usage.completion_tokens_details.reasoning_tokens == spent
    assert (thinking, answer) == (message.reasoning_content, message.content)
    # Lemonade's chat completions are OpenAI's: the same reasoning_content.
    with server.client() as c:
        r = c.post("/api/v1/chat/completions", json={"model": MODEL, "messages": ASK, **GREEDY})
    lemonade = r.json()["choices"][0]["message"]
    assert (lemonade["reasoning_content"], lemonade["content"]) == (thinking, answer)


def test_responses_reasoning_item_whole_and_streamed(server: RunningServer) -> None:
    with gpt(server) as client:
        whole = client.responses.create(
            model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=64
        )
        kinds = [item.type for item in whole.output]
        assert kinds == ["reasoning", "message"]
        thought: Any = whole.output[0]
        thinking = thought.content[0].text
        split(thinking, whole.output_text)
        assert whole.usage is not None
        assert 0 < whole.usage.output_tokens_details.reasoning_tokens < whole.usage.output_tokens
        events = list(
            client.responses.create(
                model=MODEL,
                input=ASK[0]["content"],
                temperature=0,
                max_output_tokens=64,
                stream=True,
            )
        )
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == thinking
    done: Any = events[-1]
    assert done.type == "response.completed" and done.response.output_text == whole.output_text
    with gpt(server) as client:
        off = client.responses.create(
            model=MODEL,
            input=ASK[0]["content"],
            reasoning={"effort": "none"},
            temperature=0,
            max_output_tokens=64,
        )
    assert whole.usage is not None and off.usage is not None
    assert off.usage.input_tokens > whole.usage.input_tokens, "the empty thinking is prompt"


def prompt_tokens(server: RunningServer, **extra: Any) -> int:
    with gpt(server) as client:
        out = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            **GREEDY,
            extra_body=extra,  # type: ignore[arg-type]
        )
    assert out.usage is not None
    return out.usage.prompt_tokens


def test_thinking_off_reaches_the_template(server: RunningServer) -> None:
    """Qwen3's template writes an empty `<think>\\n\\n</think>\\n\\n` when enable_thinking
    is false: the prompt is longer by it, whichever field turned thinking off."""
    on = prompt_tokens(server)
    off = prompt_tokens(server, chat_template_kwargs={"enable_thinking": False})
    assert off > on
    assert prompt_tokens(server, reasoning_effort="none") == off
    assert prompt_tokens(server, reasoning_effort="high") == on
    with ollama.Client(host=server.base_url) as client:
        no = client.chat(model="qwen3-smol", messages=ASK, think=False, options={"temperature": 0})
        yes = client.chat(model="qwen3-smol", messages=ASK, think=True, options={"temperature": 0})
    assert (no.prompt_eval_count, yes.prompt_eval_count) == (off, on)


def test_structured_output_holds_the_answer_after_the_thinking(server: RunningServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    with gpt(server) as client:
        out = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            response_format=fmt,
            **GREEDY,  # type: ignore[arg-type]
        )
    assert "city" in json.loads(out.choices[0].message.content or "")


def test_ollama_thinking_whole_and_streamed(server: RunningServer) -> None:
    opts = {"temperature": 0, "num_predict": 64}
    with ollama.Client(host=server.base_url) as client:
        whole = client.chat(model="qwen3-smol", messages=ASK, think=True, options=opts)
        split(whole.message.thinking or "", whole.message.content or "")
        parts = list(
            client.chat(model="qwen3-smol", messages=ASK, think=True, options=opts, stream=True)
        )
        gen = client.generate(
            model="qwen3-smol", prompt=ASK[0]["content"], think=True, options=opts
        )
    assert "".join(p.message.thinking or "" for p in parts) == whole.message.thinking
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert (gen.thinking, gen.response) == (whole.message.thinking, whole.message.content)


def test_anthropic_thinking_blocks_whole_and_streamed(server: RunningServer) -> None:
    with anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as claude:
        think = {"type": "enabled", "budget_tokens": 1024}
        kw: Any = {
            "model": MODEL,
            "max_tokens": 2048,
            "messages": ASK,
            "thinking": think,
            "extra_body": {"temperature": 0},
        }
        whole = claude.messages.create(**kw)
        first, text = whole.content
        assert first.type == "thinking" and text.type == "text"
        split(first.thinking, text.text)
        with claude.messages.stream(**kw) as stream:
            deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
            final = stream.get_final_message()
        assert "thinking_delta" in deltas and "signature_delta" in deltas
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
        # The next turn sends the thinking back; the template drops it before the new question.
        again = claude.messages.create(
            **{**kw, "messages": [*ASK, {"role": "assistant", "content": whole.content}, *ASK]}
        )
        assert again.content[0].type == "thinking"


def test_a_model_that_cannot_think_says_so(server: RunningServer) -> None:
    """Ollama answers `think: true` for such a model with 400 `"<model>" does not support
    thinking`; asked not to think, it answers as ever."""
    with ollama.Client(host=server.base_url) as client:
        with pytest.raises(ollama.ResponseError) as err:
            client.chat(model="plain-smol", messages=ASK, think=True)
        assert err.value.status_code == 400 and "does not support thinking" in err.value.error
        plain = client.chat(
            model="plain-smol", messages=ASK, think=False, options={"num_predict": 4}
        )
    assert plain.message.content and not plain.message.thinking
    with gpt(server) as c, pytest.raises(openai.BadRequestError, match="does not support thinking"):
        c.chat.completions.create(model=PLAIN, messages=ASK, reasoning_effort="high")  # type: ignore[arg-type]
    with httpx.Client(base_url=server.base_url, timeout=120) as h:
        r = h.post("/v1/chat/completions", json={"model": PLAIN, "messages": ASK, "max_tokens": 4})
    assert r.status_code == 200 and "reasoning_content" not in r.json()["choices"][0]["message"]
