"""Issue 49 part 1 for gpt-oss's harmony channels, through a real router, real backends
and the published clients: "A reasoning model's thinking (Qwen3 / DeepSeek-R1
`<think>...</think>`, gpt-oss's harmony channels) is returned apart from the answer,
streamed and not, as each API defines it". A copy of SmolLM2 whose vocabulary has the
harmony markers as control tokens and whose template is gpt-oss's (`tests/harmony_copy`),
on one sequence, its output forced by `--grammar` into `<|channel|>analysis<|message|>...<|end|><|start|>
assistant<|channel|>final<|message|>...<|return|>`."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from openai import OpenAI

from juggler.registry.catalog import Registry
from juggler.registry.checkpoint import resolve_checkpoint
from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.harmony_copy import FORCED, harmony_copy

pytestmark = pytest.mark.slow

MODEL = "extra.oss-smol"
ASK = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "max_tokens": 64}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("models")
    harmony_copy(resolve_checkpoint(Registry().get(DEFAULT_MODEL)), folder / "oss-smol.gguf")
    env = {"JUGGLER_MODEL_DIRS": str(folder)}
    srv = start_server(tmp_path_factory.mktemp("hs"), "--model", "", "--ctx-size", "1024", env=env)
    try:
        with srv.client(timeout=300) as c:
            args = f"--workers 1 --parallel 1 --grammar {shlex.quote(FORCED)}"
            r = c.post("/api/v1/load", json={"model_name": MODEL, "llamacpp_args": args})
            assert r.status_code == 200, r.text
        yield srv
    finally:
        srv.stop()


def gpt(server: RunningServer) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)


def split(thinking: str, answer: str) -> None:
    """The analysis alone is the thinking, the final channel alone the answer: no marker,
    no channel name, no role is left in either."""
    assert 4 <= len(thinking) <= 24 and "<|" not in thinking and thinking == thinking.strip()
    assert answer.startswith("It is ") and answer.endswith(".") and "<|" not in answer
    assert "analysis" not in answer and "assistant" not in thinking + answer


def test_listings_label_the_harmony_template(server: RunningServer) -> None:
    with server.client() as c:
        models = {m["id"]: m for m in c.get("/api/v1/models").json()["data"]}
        shown = c.post("/api/show", json={"model": "oss-smol"}).json()
    assert "reasoning" in models[MODEL]["labels"]
    assert "thinking" in shown["capabilities"]


def test_openai_reasoning_content_whole_and_streamed(server: RunningServer) -> None:
    with gpt(server) as client:
        whole = client.chat.completions.create(model=MODEL, messages=ASK, **GREEDY)  # type: ignore[arg-type]
        message: Any = whole.choices[0].message
        split(message.reasoning_content, message.content)
        assert whole.choices[0].finish_reason == "stop"
        assert whole.usage is not None and whole.usage.completion_tokens_details is not None
        spent = whole.usage.completion_tokens_details.reasoning_tokens
        assert spent is not None and 0 < spent < whole.usage.completion_tokens
        thinking, answer = "", ""
        for chunk in client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            stream=True,
            **GREEDY,  # type: ignore[arg-type]
        ):
            if chunk.choices:
                delta: Any = chunk.choices[0].delta
                thinking += getattr(delta, "reasoning_content", None) or ""
                answer += delta.content or ""
    assert (thinking, answer) == (message.reasoning_content, message.content)
    with server.client() as c:  # Lemonade's chat completions are OpenAI's
        r = c.post("/api/v1/chat/completions", json={"model": MODEL, "messages": ASK, **GREEDY})
    lemonade = r.json()["choices"][0]["message"]
    assert (lemonade["reasoning_content"], lemonade["content"]) == (thinking, answer)
    # llama-server's reasoning_format none leaves the channels in the content, unparsed.
    with server.client() as c:
        body = {"model": MODEL, "messages": ASK, "reasoning_format": "none", **GREEDY}
        raw = c.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert raw["content"].startswith("<|channel|>analysis<|message|>" + thinking)
    assert raw["content"].endswith("<|channel|>final<|message|>" + answer)


def use(server: RunningServer, **extra: Any) -> tuple[int, int]:
    """A chat's prompt tokens and how many of them the cache held from the one before."""
    with gpt(server) as client:
        out = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            extra_body=extra,
            **GREEDY,  # type: ignore[arg-type]
        )
    assert out.usage is not None and out.usage.prompt_tokens_details is not None
    return out.usage.prompt_tokens, out.usage.prompt_tokens_details.cached_tokens or 0


def same_prompt(server: RunningServer, first: dict[str, Any], then: dict[str, Any]) -> bool:
    """Whether `then` renders the prompt `first` did: on the one sequence (`--parallel 1`),
    its prompt is then in the cache but for its last few tokens; where the `Reasoning:` line differs, only the
    part before it (some 20 tokens, the question and the generation prompt, follow it)."""
    use(server, **first)
    total, cached = use(server, **then)
    assert cached >= total - 4 or cached < total - 12, (total, cached)
    return cached >= total - 4


def test_reasoning_effort_reaches_the_template(server: RunningServer) -> None:
    """gpt-oss's template takes `reasoning_effort` (medium by default); it cannot stop
    thinking, so off (effort none, enable_thinking false, Ollama's think false) is low."""
    low, medium, high = ({"reasoning_effort": e} for e in ("low", "medium", "high"))
    assert same_prompt(server, low, low) and same_prompt(server, {}, medium)
    assert not same_prompt(server, low, high) and not same_prompt(server, medium, low)
    assert not same_prompt(server, {}, high)
    assert same_prompt(server, {"reasoning_effort": "none"}, low)
    assert same_prompt(server, {"chat_template_kwargs": {"enable_thinking": False}}, low)
    with ollama.Client(host=server.base_url) as client:
        opts = {"temperature": 0, "num_predict": 64}
        for think in ("low", "high", False, True):
            out = client.chat(model="oss-smol", messages=ASK, think=think, options=opts)
            split(out.message.thinking or "", out.message.content or "")


def test_responses_reasoning_item_whole_and_streamed(server: RunningServer) -> None:
    with gpt(server) as client:
        whole = client.responses.create(
            model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=64
        )
        assert [item.type for item in whole.output] == ["reasoning", "message"]
        thought: Any = whole.output[0]
        split(thought.content[0].text, whole.output_text)
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
        assert deltas == thought.content[0].text
        done: Any = events[-1]
        assert done.response.output_text == whole.output_text
        with pytest.raises(openai.BadRequestError, match="reasoning.effort"):
            client.responses.create(
                model=MODEL, input="hi", reasoning={"effort": "high"}, max_output_tokens=8
            )


def test_ollama_thinking_whole_and_streamed(server: RunningServer) -> None:
    opts = {"temperature": 0, "num_predict": 64}
    with ollama.Client(host=server.base_url) as client:
        whole = client.chat(model="oss-smol", messages=ASK, think="medium", options=opts)
        split(whole.message.thinking or "", whole.message.content or "")
        parts = list(
            client.chat(model="oss-smol", messages=ASK, think="medium", options=opts, stream=True)
        )
        gen = client.generate(
            model="oss-smol", prompt=ASK[0]["content"], think="medium", options=opts
        )
    assert "".join(p.message.thinking or "" for p in parts) == whole.message.thinking
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert (gen.thinking, gen.response) == (whole.message.thinking, whole.message.content)


def test_anthropic_thinking_blocks_whole_and_streamed(server: RunningServer) -> None:
    with anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as claude:
        kw: Any = {
            "model": MODEL,
            "max_tokens": 2048,
            "messages": ASK,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
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
        # The next turn sends the thinking back (the template drops a final turn's analysis).
        again = claude.messages.create(
            **{**kw, "messages": [*ASK, {"role": "assistant", "content": whole.content}, *ASK]}
        )
        assert [b.type for b in again.content] == ["thinking", "text"]
