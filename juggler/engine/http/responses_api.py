"""The backend's Responses API: create (at once or streamed with the API's events),
retrieve, delete.

A response is generated on an engine session (`response_store`): a new conversation
opens one, and `previous_response_id` continues on the session that holds its
conversation's KV, so only the new input is prefilled; usage reports the rest as
`input_tokens_details.cached_tokens`. Runs on the event loop.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from juggler.api import media
from juggler.api.openai import ChatMessage, SamplingBody
from juggler.api.responses import ResponsesRequest
from juggler.engine.http.choices import Choice, chat_logprobs
from juggler.engine.http.openai_routes import render as render_prompt
from juggler.engine.http.requests import adapter_ref, sampling_params
from juggler.engine.http.response_fit import fit_turns
from juggler.engine.http.response_shapes import EventNumbers, OutputItems, response_object
from juggler.engine.http.response_store import ResponseStore, StoredResponse
from juggler.engine.http.streaming import collect, merged, sse_response
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.runtime import Engine
from juggler.engine.schedule.stream import EventKind, StreamEvent
from juggler.engine.structured.grammar import json_object_grammar, schema_grammar
from juggler.engine.structured.tools import (
    ToolCaps,
    ToolPlan,
    chat_messages,
    tool_grammar,
    tool_plan,
)
from juggler.engine.thinking.grammar import with_thinking
from juggler.engine.thinking.harmony import harmony_messages
from juggler.engine.thinking.template import (
    EMPTY_THINKING,
    NO_THINK,
    Effort,
    ThinkCaps,
    ThinkPlan,
    think_plan,
)
from juggler.engine.thinking.usage import count_reasoning
from juggler.errors import BadRequest, render

_DEFAULTS = SamplingParams()


def sampling(
    engine: Engine, body: ResponsesRequest, plan: ToolPlan | None, think: ThinkPlan = NO_THINK
) -> SamplingParams:
    d = _DEFAULTS
    fmt = body.text.format if body.text is not None else None
    grammar = None
    if fmt is not None and fmt.type == "json_object":
        grammar = json_object_grammar()
    elif fmt is not None and fmt.type == "json_schema":
        grammar = schema_grammar(fmt.schema_, param="text.format.schema")
    if plan is not None and plan.is_offered:
        if grammar is not None:
            raise BadRequest("tools: tools with text.format are not supported", param="tools")
        grammar = tool_grammar(plan)
    elif plan is not None and grammar is None:
        grammar = tool_grammar(plan)  # "none": plain text
    if grammar is not None and think.on:
        grammar = with_thinking(grammar, inside=think.inside, harmony=think.harmony)
    grammar = grammar if grammar is not None else engine.config.flags.grammar  # --grammar
    if grammar is not None:
        engine.model.check_grammar(grammar)
    limit = body.max_output_tokens
    if body.juggler_sampling:  # a created model's PARAMETERs the Responses API lacks
        d = modelfile_sampling(engine, body.juggler_sampling)
    return dataclasses.replace(
        d,
        max_new_tokens=engine.config.flags.ctx_size if limit is None else limit,
        temperature=d.temperature if body.temperature is None else body.temperature,
        top_p=d.top_p if body.top_p is None else body.top_p,
        grammar=grammar,
        top_logprobs=(body.top_logprobs or 0) if body.wants_logprobs else None,
    )


def modelfile_sampling(engine: Engine, fields: dict[str, Any]) -> SamplingParams:
    try:
        extra = SamplingBody.model_validate(fields)
    except ValidationError as exc:
        raise BadRequest(f"the model's PARAMETERs: {exc.errors()[0]['msg']}") from None
    flags = engine.config.flags
    return sampling_params(extra, flags.ctx_size, n_vocab=engine.model.n_vocab)


def fitted(
    engine: Engine,
    caps: ToolCaps,
    plan: ToolPlan | None,
    system: list[ChatMessage],
    turns: list[ChatMessage],
    reserve: int,
) -> list[ChatMessage]:
    """`turns` less their oldest items, as `truncation: "auto"` asks, so that the prompt
    and `reserve` generated tokens fit the context (off the event loop: it renders)."""

    def tokens(kept: Sequence[ChatMessage]) -> int:
        messages, tools = chat_messages([*system, *kept], plan, caps)
        return len(render_prompt(engine, messages, tools))

    def cost(item: ChatMessage) -> int:  # its own text's tokens (issue 52: counted once)
        calls = "".join(c.function.name + c.function.arguments for c in item.tool_calls or ())
        text, images = media.without_images(item.text())  # an image: at least a token
        return len(engine.model.tokenize(text + calls, add_special=False)) + images

    limit = engine.config.flags.ctx_size - reserve
    return fit_turns(turns, tokens, max(limit, 1), cost)


def _assistant_turn(choice: Choice) -> ChatMessage:
    calls = choice.calls
    thinking = choice.reasoning or None
    if calls:
        return ChatMessage.model_validate(
            {"role": "assistant", "tool_calls": calls, "reasoning_content": thinking}
        )
    return ChatMessage(role="assistant", content=choice.text, reasoning_content=thinking)


def response_think(caps: ThinkCaps, model: str, body: ResponsesRequest) -> ThinkPlan:
    """`reasoning.effort`: "none" turns a reasoning model's thinking off, any other
    effort on (a model that cannot think answers it with a 400); unset, the template's
    default."""
    effort = body.reasoning.effort if body.reasoning is not None else None
    if caps.harmony and effort not in (None, "medium"):
        raise BadRequest(
            "reasoning.effort: gpt-oss thinks at its template's default (medium) here; "
            "other efforts are set through /v1/chat/completions' reasoning_effort",
            param="reasoning.effort",
        )
    asked: Effort | None = None if effort is None else "none" if effort == "none" else "high"
    try:
        return think_plan(caps, model, effort=asked)
    except BadRequest as exc:
        raise BadRequest(exc.message, param="reasoning.effort") from None


def header_suffix(caps: ThinkCaps, think: ThinkPlan) -> str:
    """What follows a session's generation prompt: the empty thinking that turns a
    reasoning model's thinking off (what Qwen3's template writes for enable_thinking
    false), else nothing."""
    if not think.reasons or think.on:
        return ""
    return "\n</think>\n\n" if caps.opens else EMPTY_THINKING


def _status(finish: str | None) -> str:
    return "incomplete" if finish == "length" else "completed"


async def create(
    engine: Engine,
    caps: ToolCaps,
    store: ResponseStore,
    body: ResponsesRequest,
    request: Request,
    response_id: str,
) -> Any:
    engine.require_llm()
    created_at = int(time.time())
    plan = tool_plan(body.chat_tools(), body.chat_tool_choice(), body.parallel_tool_calls, caps)
    think = response_think(caps.think, engine.config.model_name, body)
    params = sampling(engine, body, plan, think)
    prev = None
    if body.previous_response_id is not None:
        prev = store.get(body.previous_response_id, param="previous_response_id")
    new = body.messages()
    turns = [*(prev.turns if prev else []), *new]
    system = [ChatMessage(role="system", content=body.instructions)] if body.instructions else []
    if body.truncation == "auto":
        reserve = body.max_output_tokens or 1
        kept = await run_in_threadpool(fitted, engine, caps, plan, system, turns, reserve)
        if len(kept) < len(turns):
            turns, prev = kept, None  # the session's KV holds what was dropped
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    setup = json.dumps([body.instructions, tools])
    sid = store.claim(prev, setup) if prev is not None else None
    if sid is not None and prev is not None:
        # The session holds everything up to `prev`: append only what follows it.
        prior, _ = chat_messages([*system, *prev.turns], plan, caps)
        full, template_tools = chat_messages([*system, *turns], plan, caps)
        delta = full[len(prior) :]
    else:
        adapter = adapter_ref(body.juggler_adapter)
        sid = str((await engine.create_session(adapter))["session_id"])
        delta, template_tools = chat_messages([*system, *turns], plan, caps)
    try:
        suffix = header_suffix(caps.think, think)
        delta = harmony_messages(delta) if think.harmony else delta
        await engine.append_input(sid, messages=delta, tools=template_tools, header_suffix=suffix)
        sink = await engine.generate(sid, params)
    except BaseException:
        store.end_later(sid)
        raise
    name = engine.config.model_name
    choice = Choice(0, plan, think)

    def logprobs(ev: StreamEvent) -> list[dict[str, Any]]:
        if not body.wants_logprobs or not ev.logprobs:
            return []
        return list(chat_logprobs(ev.logprobs, engine.model.piece)["content"])

    def finish(ev: StreamEvent, output: list[dict[str, Any]]) -> dict[str, Any]:
        obj = response_object(
            response_id,
            name,
            body,
            created_at=created_at,
            status=_status(ev.finish_reason),
            output=output,
            stats=ev.stats,
        )
        spent = count_reasoning(engine.model.tokenize, [choice.reasoning])
        obj["usage"]["output_tokens_details"]["reasoning_tokens"] = spent
        if body.store:
            answer = _assistant_turn(choice)
            s = ev.stats
            cells = s.input_tokens + s.output_tokens if s is not None else 0
            store.put(StoredResponse(response_id, obj, [*turns, answer], setup, sid, cells))
        else:
            store.end_later(sid)
        return obj

    if not body.stream:
        try:
            (ev,) = await collect([sink], request)
        except BaseException:
            store.end_later(sid)
            raise
        items = OutputItems()
        assert choice.tools is not None
        items.feed(choice.deltas(ev), logprobs(ev))
        items.close(_status(ev.finish_reason))
        return finish(ev, items.items)
    return sse_response(
        _events(choice, sink, finish, logprobs, store, sid, body, response_id, name, created_at),
        [sink],
    )


async def _events(
    choice: Choice,
    sink: Any,
    finish: Any,
    logprobs: Any,
    store: ResponseStore,
    sid: str,
    body: ResponsesRequest,
    response_id: str,
    name: str,
    created_at: int,
) -> AsyncIterator[bytes]:
    numbers, items = EventNumbers(body.obfuscate), OutputItems()
    start = response_object(
        response_id, name, body, created_at=created_at, status="in_progress", output=[]
    )
    yield numbers.frame({"type": "response.created", "response": start})
    yield numbers.frame({"type": "response.in_progress", "response": start})
    done = False
    try:
        async for _, ev in merged([sink]):
            deltas = choice.deltas(ev) if ev.text or ev.kind is EventKind.DONE else []
            for event in items.feed(deltas, logprobs(ev)):
                yield numbers.frame(event)
            if ev.kind is EventKind.ERROR:
                assert ev.error is not None
                failed = response_object(
                    response_id,
                    name,
                    body,
                    created_at=created_at,
                    status="failed",
                    output=items.items,
                    error=render(ev.error)["error"],
                )
                yield numbers.frame({"type": "response.failed", "response": failed})
                return
            if ev.kind is EventKind.DONE:
                status = _status(ev.finish_reason)
                for event in items.close(status):
                    yield numbers.frame(event)
                obj = finish(ev, items.items)
                done = True
                kind = "response.completed" if status == "completed" else "response.incomplete"
                yield numbers.frame({"type": kind, "response": obj})
    finally:
        if not done:
            store.end_later(sid)
