"""Issue 24, "Every popular client works unchanged": the OpenAI Agents SDK
(openai-agents) with its default model class, `OpenAIResponsesModel` (the Responses
API), against a real router and SmolLM2-135M. Every run failed with 400 `include:
unknown or unsupported parameter` before: the SDK sends `include` on every request,
and the other Responses fields as its settings ask."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    ModelSettings,
    Runner,
    RunResult,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from agents.models.openai_provider import OpenAIProvider
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI
from openai.types.shared import Reasoning

from tests.conftest import DEFAULT_MODEL, RunningServer

pytestmark = pytest.mark.slow
INSTRUCTIONS = "You are a helpful assistant."
#: The SDK treats an incomplete response (max_output_tokens reached) as a failure: room
#: for the small model's whole answer.
ROOM = 400


class Recorder:
    """The JSON bodies the SDK sent, read off its HTTP client."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        #: The thread's default loop, which `Runner.run_sync` runs on.
        self.loop = loop

    async def __call__(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)
        if request.content:
            self.bodies.append(json.loads(request.content))


@pytest.fixture()
def sent(chat_server: RunningServer) -> Iterator[Recorder]:
    """The SDK's default client points at the server's /v1 (the SDK's own defaults
    otherwise: its default model class, the Responses API); tracing export is off. Each
    test has its own default event loop, closed with the client."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    recorder = Recorder(loop)
    http = httpx.AsyncClient(event_hooks={"request": [recorder]}, timeout=120)
    client = AsyncOpenAI(
        base_url=chat_server.base_url + "/v1", api_key="unused", http_client=http, max_retries=0
    )
    set_tracing_disabled(True)
    set_default_openai_api("responses")
    set_default_openai_client(client, use_for_tracing=False)
    try:
        yield recorder
    finally:
        loop.run_until_complete(http.aclose())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        asyncio.set_event_loop(None)


def test_the_default_model_class_is_the_responses_model(sent: Recorder) -> None:
    assert isinstance(OpenAIProvider().get_model(DEFAULT_MODEL), OpenAIResponsesModel)


def test_an_agent_runs_with_the_sdk_defaults(sent: Recorder) -> None:
    """Issue 24: "OpenAI Agents SDK, its default model class (Responses API): every run
    fails with 400 `include: unknown or unsupported parameter`". The SDK's settings are
    its defaults but for a greedy temperature (so that the small model ends its answer)."""
    agent = Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=DEFAULT_MODEL,
        model_settings=ModelSettings(temperature=0),
    )
    result = Runner.run_sync(agent, "What is the capital of France?")
    assert isinstance(result.final_output, str) and result.final_output.strip()
    (body,) = sent.bodies
    assert sent.paths == ["/v1/responses"]
    assert body["include"] == [] and body["instructions"] == INSTRUCTIONS
    assert result.last_response_id is not None and result.last_response_id.startswith("resp_")


def test_an_agent_calls_a_function_tool_and_answers_with_its_result(sent: Recorder) -> None:
    """The SDK's tool round trip: the model calls the tool (tool_choice names it), the
    SDK runs it and sends the call and its output back as input items, and the model
    answers from them."""
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return f"Sunny, 24 C in {city}"

    agent = Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=DEFAULT_MODEL,
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=ROOM),
    )
    result = Runner.run_sync(agent, "What is the weather in Paris?")
    assert len(cities) == 1 and cities[0].strip()
    kinds = [type(item) for item in result.new_items]
    assert kinds == [ToolCallItem, ToolCallOutputItem, MessageOutputItem]
    assert isinstance(result.final_output, str) and result.final_output.strip()
    first, second = sent.bodies
    assert first["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert first["tools"][0]["strict"] is True
    types = [item.get("type", "message") for item in second["input"]]
    assert types == ["message", "function_call", "function_call_output"]
    assert second["input"][2]["output"] == f"Sunny, 24 C in {cities[0]}"


def test_model_settings_that_map_to_responses_fields_take_effect(
    sent: Recorder, chat_server: RunningServer
) -> None:
    """Issue 24: "Accept every Responses field the official API defines: honour what
    has a meaning here, accept the neutral values of the rest": metadata comes back,
    store: false keeps nothing, top_logprobs returns log-probabilities, and reasoning
    effort none, verbosity medium, in-memory cache retention and an include of
    reasoning items are accepted."""
    settings = ModelSettings(
        temperature=0,
        max_tokens=ROOM,
        metadata={"suite": "juggler"},
        store=False,
        truncation="auto",
        top_logprobs=2,
        reasoning=Reasoning(effort="none"),
        verbosity="medium",
        prompt_cache_retention="in_memory",
        response_include=["reasoning.encrypted_content"],
        extra_args={"prompt_cache_key": "tests", "safety_identifier": "t1"},
    )
    agent = Agent(
        name="assistant", instructions=INSTRUCTIONS, model=DEFAULT_MODEL, model_settings=settings
    )
    result = Runner.run_sync(agent, "Name one color, in one word.")
    (body,) = sent.bodies
    assert set(body["include"]) == {"reasoning.encrypted_content", "message.output_text.logprobs"}
    assert body["store"] is False and body["truncation"] == "auto"
    (raw,) = result.raw_responses
    (message,) = raw.output
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text" and part.logprobs
    assert "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)
    with chat_server.client() as c:
        assert c.get(f"/v1/responses/{raw.response_id}").status_code == 404


def test_a_conversation_continues_on_the_server_with_previous_response_id(
    sent: Recorder,
) -> None:
    """The SDK's server-managed conversation (`previous_response_id`): the second run
    sends only its new input and the server reuses the first run's cached tokens."""
    agent = Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=DEFAULT_MODEL,
        model_settings=ModelSettings(temperature=0, max_tokens=ROOM),
    )

    async def two_runs() -> tuple[RunResult, RunResult]:
        # One loop for both (`run_sync` shuts a loop's async generators down after a run).
        first = await Runner.run(agent, "What is the capital of France?")
        second = await Runner.run(
            agent, "And of Germany?", previous_response_id=first.last_response_id
        )
        return first, second

    first, second = sent.loop.run_until_complete(two_runs())
    assert isinstance(second.final_output, str) and second.final_output.strip()
    assert sent.bodies[1]["previous_response_id"] == first.last_response_id
    assert len(sent.bodies[1]["input"]) == 1
    usage = second.raw_responses[0].usage
    assert usage is not None and usage.input_tokens_details.cached_tokens > 0


def test_a_streamed_run_delivers_the_text_as_it_comes(sent: Recorder) -> None:
    """Runner.run_streamed: the SDK reads the Responses API's events."""
    agent = Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=DEFAULT_MODEL,
        model_settings=ModelSettings(temperature=0, max_tokens=ROOM),
    )

    async def run() -> tuple[str, str]:
        streamed = Runner.run_streamed(agent, "Say hello.")
        deltas = []
        async for event in streamed.stream_events():
            if event.type == "raw_response_event" and event.data.type == (
                "response.output_text.delta"
            ):
                deltas.append(event.data.delta)
        return "".join(deltas), str(streamed.final_output)

    text, final = sent.loop.run_until_complete(run())
    assert text and text == final
    assert sent.bodies[0]["stream"] is True
