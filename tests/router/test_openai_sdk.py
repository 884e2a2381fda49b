"""Issue 14 through the official `openai` package, against a real router and backend on
SmolLM2-135M: structured outputs, tool calls, logprobs, n, stop strings, penalties,
logit bias, seeds, and what is refused. (The Responses API: test_responses_api.py.)"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal

import jsonschema_rs
import openai
import pydantic
import pytest
from openai.lib._pydantic import to_strict_json_schema

from tests.conftest import DEFAULT_MODEL, RunningServer
from tests.router.test_end_to_end import oai

pytestmark = pytest.mark.slow
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


class City(pydantic.BaseModel):
    name: Annotated[str, pydantic.Field(max_length=40)]
    country: Annotated[str, pydantic.Field(max_length=40)]
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]
    is_capital: bool


PLACES = [
    "Paris", "Tokyo", "Lagos", "Lima", "Sydney", "Cairo", "Oslo", "Toronto", "Mumbai", "Rome",
    "Nairobi", "Bogota", "Seoul", "Berlin", "Madrid", "Hanoi", "Quito", "Dublin", "Perth", "Accra",
]  # fmt: skip
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK_WEATHER = [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}]


def test_json_schema_answers_parse_and_validate_for_20_prompts(
    chat_server: RunningServer,
) -> None:
    """Issue 14: "a json_schema response parses and validates against its schema for 20
    different prompts" (the SDK's `parse`, which sends the model as a strict schema)."""
    client = oai(chat_server)
    validator = jsonschema_rs.validator_for(to_strict_json_schema(City))

    def ask(place: str) -> tuple[str, City | None, str | None]:
        reply = client.chat.completions.parse(
            model=DEFAULT_MODEL,
            messages=[SYSTEM, {"role": "user", "content": f"Describe the city of {place}."}],
            response_format=City,
            temperature=0,
            max_tokens=160,  # a bound the schema's longest answer stays within
        )
        choice = reply.choices[0]
        return choice.message.content or "", choice.message.parsed, choice.finish_reason

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, PLACES))
    for content, parsed, finish in answers:
        assert finish == "stop", content
        assert isinstance(parsed, City), content
        assert validator.is_valid(json.loads(content)), content
    assert len({c for c, _, _ in answers}) > 10, "the answers follow the prompts"


def test_json_object_mode_answers_with_an_object(chat_server: RunningServer) -> None:
    reply = oai(chat_server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[
            SYSTEM,
            {"role": "user", "content": "Reply in JSON: what is the capital of France?"},
        ],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=100,
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


def _call_round_trip(client: openai.OpenAI, stream: bool) -> tuple[Any, str]:
    """Call get_weather, send its result back, get the final answer."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    kw: dict[str, Any] = {"model": DEFAULT_MODEL, "temperature": 0, "tools": [WEATHER]}
    if not stream:
        first = client.chat.completions.create(
            messages=ASK_WEATHER, tool_choice=choice, parallel_tool_calls=False, **kw
        )
        assert first.choices[0].finish_reason == "tool_calls"
        message = first.choices[0].message
        assert message.content is None and message.tool_calls
        (call,) = message.tool_calls
        call_id, name, args = call.id, call.function.name, call.function.arguments  # type: ignore[union-attr]
    else:
        calls: dict[int, dict[str, str]] = {}
        finish = None
        for chunk in client.chat.completions.create(
            messages=ASK_WEATHER,
            tool_choice=choice,
            parallel_tool_calls=False,
            stream=True,
            **kw,
        ):
            delta = chunk.choices[0].delta
            for tc in delta.tool_calls or []:
                got = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                got["id"] += tc.id or ""
                got["name"] += (tc.function and tc.function.name) or ""
                got["arguments"] += (tc.function and tc.function.arguments) or ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls" and list(calls) == [0]
        call_id, name, args = calls[0]["id"], calls[0]["name"], calls[0]["arguments"]
    assert name == "get_weather" and call_id.startswith("call_")
    city = json.loads(args)["city"]
    assert isinstance(city, str) and city
    history = [
        *ASK_WEATHER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "Sunny, 24 degrees Celsius."},
    ]
    # The answer: SmolLM2-135M would call again and again under "auto"; "none" makes it
    # answer from the result.
    kw["tool_choice"] = "none"
    if not stream:
        final = client.chat.completions.create(messages=history, max_tokens=60, **kw)
        return final.choices[0], final.choices[0].message.content or ""
    pieces, last = [], None
    for chunk in client.chat.completions.create(messages=history, max_tokens=60, stream=True, **kw):
        assert not chunk.choices[0].delta.tool_calls
        pieces.append(chunk.choices[0].delta.content or "")
        last = chunk.choices[0]
    return last, "".join(pieces)


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_round_trip(chat_server: RunningServer, stream: bool) -> None:
    """Issue 14: "a tool call round trip (call, result, final answer), streamed and not"."""
    last, answer = _call_round_trip(oai(chat_server), stream)
    assert last.finish_reason == "stop"
    assert "Sunny" in answer or "24" in answer, answer


def test_required_tool_choice_may_call_several_tools_in_parallel(
    chat_server: RunningServer,
) -> None:
    reply = oai(chat_server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[SYSTEM, {"role": "user", "content": "Weather in Paris and in Rome?"}],
        tools=[WEATHER],
        tool_choice="required",
        temperature=0,
        max_tokens=120,
    )
    calls = reply.choices[0].message.tool_calls or []
    assert calls and len({c.id for c in calls}) == len(calls)
    for c in calls:
        assert c.function.name == "get_weather"  # type: ignore[union-attr]
        assert set(json.loads(c.function.arguments)) == {"city"}  # type: ignore[union-attr]


def test_logprobs_are_consistent_with_the_greedy_choice(chat_server: RunningServer) -> None:
    """Issue 14: "logprobs sum consistently with greedy choice": at temperature 0 each
    token is the most likely one, its logprob is the largest, and the alternatives'
    probabilities add up to at most 1."""
    reply = oai(chat_server).chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=16,
        logprobs=True,
        top_logprobs=5,
    )
    choice = reply.choices[0]
    content = choice.logprobs.content  # type: ignore[union-attr]
    assert content and "".join(t.token for t in content) == choice.message.content
    for t in content:
        best = t.top_logprobs[0]
        assert (best.token, best.logprob) == (t.token, t.logprob)
        assert all(alt.logprob <= t.logprob <= 0 for alt in t.top_logprobs)
        assert sum(math.exp(alt.logprob) for alt in t.top_logprobs) <= 1 + 1e-6
    legacy = oai(chat_server).completions.create(
        model=DEFAULT_MODEL,
        prompt="The capital of France is",
        temperature=0,
        max_tokens=8,
        logprobs=3,
    )
    lp = legacy.choices[0].logprobs
    assert lp is not None and "".join(lp.tokens or []) == legacy.choices[0].text
    for token, value, top in zip(
        lp.tokens or [], lp.token_logprobs or [], lp.top_logprobs or [], strict=True
    ):
        assert max(top.values()) == value and top[token] == value


def test_n_3_gives_three_choices(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    reply = client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[SYSTEM, {"role": "user", "content": "Name a fruit."}],
        temperature=1.0,
        seed=7,
        n=3,
        max_tokens=12,
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content for c in reply.choices)
    assert reply.usage is not None and reply.usage.completion_tokens >= 3
    texts: dict[int, str] = {}
    usage = None
    for chunk in client.chat.completions.create(
        model=DEFAULT_MODEL,
        messages=[SYSTEM, {"role": "user", "content": "Name a fruit."}],
        temperature=1.0,
        seed=7,
        n=3,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
        usage = chunk.usage or usage
    # (Not the same texts: the second request reuses cached KV, and logits computed in
    # other batches differ in their last bits, enough to change a draw at temperature 1.)
    assert sorted(texts) == [0, 1, 2] and all(texts.values())
    assert usage is not None and usage.completion_tokens >= 3


def test_a_seed_reproduces_a_sampled_answer(chat_server: RunningServer) -> None:
    client = oai(chat_server)

    def sample(seed: int) -> str:
        reply = client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[SYSTEM, {"role": "user", "content": "Tell me a story."}],
            temperature=1.2,
            seed=seed,
            max_tokens=24,
        )
        return reply.choices[0].message.content or ""

    first = sample(11)
    assert sample(11) == first
    assert any(sample(s) != first for s in (12, 13, 14))


def test_a_stop_string_across_token_boundaries_is_cut_from_the_stream(
    chat_server: RunningServer,
) -> None:
    client = oai(chat_server)
    ask: dict[str, Any] = {
        "model": DEFAULT_MODEL,
        "messages": [SYSTEM, {"role": "user", "content": "Describe Paris in two sentences."}],
        "temperature": 0,
        "max_tokens": 40,
    }
    full = client.chat.completions.create(logprobs=True, **ask).choices[0]
    tokens = [t.token for t in full.logprobs.content]  # type: ignore[union-attr]
    k = next(i for i in range(3, len(tokens)) if len(tokens[i]) >= 2 and len(tokens[i + 1]) >= 2)
    stop = tokens[k][-2:] + tokens[k + 1][:2]
    content = full.message.content or ""
    pieces = []
    finish = None
    for chunk in client.chat.completions.create(stop=[stop], stream=True, **ask):
        pieces.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == content[: content.index(stop)]
    assert finish == "stop"


def test_frequency_and_presence_penalties_curb_repetition(chat_server: RunningServer) -> None:
    """OpenAI's penalties lower the logits of tokens already generated: greedy counting
    repeats ", " at every step, penalized it soon stops."""
    client = oai(chat_server)

    def commas(**kw: Any) -> int:
        reply = client.completions.create(
            model=DEFAULT_MODEL,
            prompt="1, 2, 3, 4, 5, 6, 7,",
            temperature=0,
            max_tokens=24,
            **kw,
        )
        assert reply.usage is not None and reply.usage.completion_tokens <= 24
        return reply.choices[0].text.count(",")

    plain = commas()
    assert plain >= 5
    assert commas(frequency_penalty=2.0) < plain
    assert commas(presence_penalty=2.0) < plain


def _first_greedy_token(server: RunningServer, prompt: str) -> tuple[int, str]:
    """The id and text of the greedy next token (the session API streams token ids)."""
    with server.client() as c:
        sid = c.post("/api/v1/sessions", json={"model": DEFAULT_MODEL}).json()["session_id"]
        c.post(f"/api/v1/sessions/{sid}/input", json={"text": prompt})
        with c.stream(
            "POST",
            f"/api/v1/sessions/{sid}/generate",
            json={"max_new_tokens": 1, "temperature": 0},
        ) as r:
            events = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
        c.delete(f"/api/v1/sessions/{sid}")
    return events[0]["token_ids"][0], events[0]["text"]


def test_logit_bias_bans_and_forces_tokens(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    prompt = "The capital of France is"
    token, text = _first_greedy_token(chat_server, prompt)
    ask: dict[str, Any] = {"model": DEFAULT_MODEL, "temperature": 0, "max_tokens": 3}
    plain = client.completions.create(prompt=prompt, **ask).choices[0].text
    assert plain.startswith(text)
    banned = client.completions.create(prompt=prompt, logit_bias={str(token): -100}, **ask)
    assert not banned.choices[0].text.startswith(text)
    forced = client.completions.create(prompt="Hello", logit_bias={str(token): 100}, **ask)
    assert forced.choices[0].text == text * 3


def test_what_is_not_implemented_is_refused_by_the_router(chat_server: RunningServer) -> None:
    client = oai(chat_server)
    for extra, param in (
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model=DEFAULT_MODEL, messages=ASK_WEATHER, max_tokens=4, extra_body=extra
            )
        body = err.value.body
        assert isinstance(body, dict)
        assert body["param"] == param and body["code"] == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError) as err:  # issue 49: SmolLM2 does not reason
        client.chat.completions.create(
            model=DEFAULT_MODEL, messages=ASK_WEATHER, max_tokens=4, reasoning_effort="low"
        )
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "reasoning_effort"
    assert "does not support thinking" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=DEFAULT_MODEL, messages=ASK_WEATHER, max_tokens=0)
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=ASK_WEATHER,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"$ref": "https://example.com/s.json"}},
            },
        )
