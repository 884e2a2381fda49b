"""A created model's Modelfile on OpenAI's and Anthropic's routes (issue 49 part 4; Ollama
applies SYSTEM, TEMPLATE, MESSAGE and PARAMETER on its OpenAI-compatible routes too),
through the published `openai` and `anthropic` clients against a real router and
SmolLM2. Each is seen taking effect by comparing greedy answers and prompt token counts
with Ollama's `/api/chat` on the same created model (whose rules `test_modelfile_live`
proves against the base model spelled out) or with the base model given the same
request by hand. Speculative drafts are off so that repeated prompts keep their text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from openai import OpenAI

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server

pytestmark = pytest.mark.slow
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 42}
SYSTEM = "You are a pirate. Answer like a pirate."
ASK = [{"role": "user", "content": "Where is the treasure?"}]
HISTORY = [
    {"role": "user", "content": "Is Toronto in Canada?"},
    {"role": "assistant", "content": "yes"},
]
TEMPLATE = "{{ if .System }}{{ .System }}\n{{ end }}Question: {{ .Prompt }}\nAnswer:"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("faces"),
        "--model",
        DEFAULT_MODEL,
        "--ctx-size",
        "1024",
        "--max-loaded-models",
        "4",
        "--llamacpp-args",
        "--speculative off",
    )
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        with ollama.Client(host=srv.base_url, timeout=300) as c:
            params = {**GREEDY, "num_predict": 5}
            c.create("pirate", from_=DEFAULT_MODEL, system=SYSTEM, parameters=params)
            c.create("canada", from_=DEFAULT_MODEL, messages=HISTORY, parameters=params)
            c.create("qa", from_=DEFAULT_MODEL, template=TEMPLATE, system="Be brief.")
            stops = {**params, "stop": ["treasure"]}
            c.create("stopper", from_=DEFAULT_MODEL, system=SYSTEM, parameters=stops)
        yield srv
    finally:
        srv.stop()


def gpt(server: RunningServer) -> OpenAI:
    return OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=300)


def ollama_chat(server: RunningServer, model: str, messages: list[Any], **options: Any) -> Any:
    with ollama.Client(host=server.base_url, timeout=300) as c:
        return c.chat(model, messages=messages, options=options or None)


def test_openai_chat_takes_system_and_parameters(server: RunningServer) -> None:
    """SYSTEM is the system message and PARAMETERs the defaults, as on /api/chat; a
    request's fields override them one by one, and its own system message replaces SYSTEM."""
    ours = ollama_chat(server, "pirate", ASK)
    with gpt(server) as client:
        got = client.chat.completions.create(model="pirate", messages=ASK)  # type: ignore[arg-type]
        assert got.usage is not None and got.usage.completion_tokens == 5
        assert got.choices[0].finish_reason == "length"
        assert got.choices[0].message.content == ours.message.content
        assert got.usage.prompt_tokens == ours.prompt_eval_count
        longer = client.chat.completions.create(model="pirate", messages=ASK, max_tokens=9)  # type: ignore[arg-type]
        assert longer.usage is not None and longer.usage.completion_tokens > 5
        own = [{"role": "system", "content": "Be terse."}, *ASK]
        mine = client.chat.completions.create(model="pirate", messages=own)  # type: ignore[arg-type]
        base = client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=own,  # type: ignore[arg-type]
            max_tokens=5,
            **GREEDY,
        )
    assert mine.choices[0].message.content == base.choices[0].message.content
    assert mine.usage is not None and base.usage is not None
    assert mine.usage.prompt_tokens == base.usage.prompt_tokens != got.usage.prompt_tokens
    # Lemonade's chat completions are OpenAI's route: the same answer.
    with server.client(timeout=300) as c:
        r = c.post("/api/v1/chat/completions", json={"model": "pirate", "messages": ASK})
    assert r.json()["choices"][0]["message"]["content"] == ours.message.content


def test_completions_take_the_parameters_and_the_prompt_raw(server: RunningServer) -> None:
    with gpt(server) as client:
        got = client.completions.create(model="stopper", prompt="The treasure is")
        base = client.completions.create(
            model=DEFAULT_MODEL, prompt="The treasure is", max_tokens=5, stop=["treasure"], **GREEDY
        )
    assert got.choices[0].text == base.choices[0].text
    assert got.usage is not None and base.usage is not None and got.usage.completion_tokens <= 5
    assert got.usage.prompt_tokens == base.usage.prompt_tokens


def test_messages_come_before_the_conversation(server: RunningServer) -> None:
    ours = ollama_chat(server, "canada", ASK)
    with gpt(server) as client:
        got = client.chat.completions.create(model="canada", messages=ASK)  # type: ignore[arg-type]
        spelled = client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[*HISTORY, *ASK],  # type: ignore[list-item]
            max_tokens=5,
            **GREEDY,
        )
    assert got.choices[0].message.content == spelled.choices[0].message.content
    assert got.usage is not None and spelled.usage is not None
    assert got.usage.prompt_tokens == spelled.usage.prompt_tokens == ours.prompt_eval_count


def test_a_template_renders_the_chat_prompt(server: RunningServer) -> None:
    rendered = "Be brief.\nQuestion: What colour is the sky?\nAnswer:"
    question = [{"role": "user", "content": "What colour is the sky?"}]
    with gpt(server) as client:
        got = client.chat.completions.create(model="qa", messages=question, max_tokens=6, **GREEDY)  # type: ignore[arg-type]
        raw = client.completions.create(
            model=DEFAULT_MODEL, prompt=rendered, max_tokens=6, **GREEDY
        )
        assert got.choices[0].message.content == raw.choices[0].text
        assert got.usage is not None and raw.usage is not None
        assert got.usage.prompt_tokens == raw.usage.prompt_tokens
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        with pytest.raises(openai.BadRequestError, match="TEMPLATE"):
            client.chat.completions.create(model="qa", messages=question, tools=[tool])  # type: ignore[arg-type, list-item]


def prompt(message: Any) -> int:
    """Anthropic's prompt tokens: those read from the cache are counted apart."""
    return int(message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0))


def test_anthropic_messages_take_the_modelfile(server: RunningServer) -> None:
    with anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as claude:
        got = claude.messages.create(model="pirate", max_tokens=5, messages=ASK)  # type: ignore[arg-type]
        ours = ollama_chat(server, "pirate", ASK)
        assert got.content[0].type == "text" and got.content[0].text == ours.message.content
        assert prompt(got) == ours.prompt_eval_count
        own = claude.messages.create(model="pirate", max_tokens=5, system="Be terse.", messages=ASK)  # type: ignore[arg-type]
        base = claude.messages.create(
            model=DEFAULT_MODEL,
            max_tokens=5,
            system="Be terse.",
            messages=ASK,  # type: ignore[arg-type]
            extra_body={"temperature": 0},
        )
        assert [b.model_dump() for b in own.content] == [b.model_dump() for b in base.content]
        assert prompt(own) == prompt(base) != prompt(got)
        # count_tokens counts the prompt the model gets: its SYSTEM, or its TEMPLATE's.
        counted = claude.messages.count_tokens(model="pirate", messages=ASK)  # type: ignore[arg-type]
        assert counted.input_tokens == prompt(got)
        sky = [{"role": "user", "content": "What colour is the sky?"}]
        templated = claude.messages.count_tokens(model="qa", messages=sky)  # type: ignore[arg-type]
        rendered = "Be brief.\nQuestion: What colour is the sky?\nAnswer:"
        with server.client() as c:
            raw = c.post(
                "/v1/completions",
                json={"model": DEFAULT_MODEL, "prompt": rendered, "max_tokens": 1},
            )
        assert templated.input_tokens == raw.json()["usage"]["prompt_tokens"]
        canada = claude.messages.create(model="canada", max_tokens=5, messages=ASK)  # type: ignore[arg-type]
        assert prompt(canada) == ollama_chat(server, "canada", ASK).prompt_eval_count


def test_responses_take_system_messages_and_parameters(server: RunningServer) -> None:
    ours = ollama_chat(server, "pirate", ASK)
    with gpt(server) as client:
        got = client.responses.create(model="pirate", input=ASK[0]["content"])
        assert got.output_text == ours.message.content
        assert got.usage is not None and got.usage.input_tokens == ours.prompt_eval_count
        assert got.usage.output_tokens == 5
        canada = client.responses.create(model="canada", input=ASK[0]["content"])
        assert canada.usage is not None
        assert canada.usage.input_tokens == ollama_chat(server, "canada", ASK).prompt_eval_count
        with pytest.raises(openai.BadRequestError, match="TEMPLATE"):
            client.responses.create(model="qa", input="hi")
        # PARAMETERs the Responses API has no field for (stop, seed) apply too.
        stopped = client.responses.create(model="stopper", input=ASK[0]["content"])
        chat = client.chat.completions.create(model="stopper", messages=ASK)  # type: ignore[arg-type]
    assert stopped.output_text == chat.choices[0].message.content
    assert "treasure" in (ours.message.content or "") and "treasure" not in stopped.output_text
    assert stopped.usage is not None and stopped.usage.output_tokens < 5, "the stop ended it"


def test_clients_cannot_send_the_routers_own_fields(server: RunningServer) -> None:
    """The rendered TEMPLATE and the Responses API's extra PARAMETERs travel from the
    router to the backend only: a client's are a 400 naming them."""
    with server.client() as c:
        for path, body in (
            ("/v1/chat/completions", {"messages": ASK, "juggler_prompt": "x"}),
            ("/v1/responses", {"input": "hi", "juggler_sampling": {"seed": 1}}),
        ):
            r = c.post(path, json={"model": DEFAULT_MODEL, **body})
            field = next(k for k in body if k.startswith("juggler_"))
            assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
