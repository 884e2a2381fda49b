"""The backend's OpenAI chat and completions routes: from a validated body to the
prompt, the sampling of each choice (grammar, logprobs, seeds), the generations, and
the answer (all at once, or streamed as chunks).

Runs on the event loop, except the preparation of a request (tool plan, chat template,
tokenizing, grammar building and parsing: milliseconds usually, much longer for a
hostile body), which runs in a worker thread so that it never holds up the streams of
other requests (issue 27). A client that left while its request was prepared gets no
generation. Each of the `n` choices is its own stateless generation, side by side in
the batch (a request's choices share its prompt, and so its cached prefix).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jinja2
from fastapi import Request
from starlette.concurrency import run_in_threadpool

from juggler.api import openai as api
from juggler.api import sse
from juggler.api.media import IMAGE_SLOT
from juggler.engine.http import responses as shape
from juggler.engine.http.choices import (
    Choice,
    chat_logprobs,
    completion_logprobs,
    openai_finish,
    stop_fields,
)
from juggler.engine.http.requests import adapter_ref, choice_params, format_grammar, sampling_params
from juggler.engine.http.streaming import (
    collect,
    ensure_connected,
    event_frames,
    sse_response,
    unless_gone,
)
from juggler.engine.llama.sampling import SamplingParams
from juggler.engine.media_prompt import tokenize_with_images
from juggler.engine.runtime import Engine
from juggler.engine.schedule.messages import AdapterRef
from juggler.engine.schedule.stream import EventKind, RequestStats, StreamEvent, StreamSink
from juggler.engine.structured.tools import (
    ToolCaps,
    ToolPlan,
    chat_messages,
    tool_grammar,
    tool_plan,
)
from juggler.engine.thinking.budget import think_budget
from juggler.engine.thinking.grammar import answer_grammar
from juggler.engine.thinking.harmony import harmony_messages
from juggler.engine.thinking.template import NO_THINK, ThinkPlan, request_plan
from juggler.engine.thinking.usage import with_reasoning
from juggler.errors import BadRequest


async def start_choices(
    engine: Engine,
    prompt: list[int],
    params: list[SamplingParams],
    t0: float,
    *,
    stream: bool,
    adapter: AdapterRef | None = None,
    request: Request | None = None,
) -> list[StreamSink]:
    """One generation per choice (with the request's LoRA adapter, if any), each once a
    worker accepts it; if one cannot start, or the client leaves while they wait, those
    started are cancelled."""
    sinks: list[StreamSink] = []
    try:
        for p in params:
            started = engine.complete(prompt, p, t0, incremental=stream, adapter=adapter)
            sinks.append(await unless_gone(request, started))
    except BaseException:
        for sink in sinks:
            sink.cancel()
        raise
    return sinks


def render(
    engine: Engine, messages: list[dict[str, Any]], tools: Any = None, think: ThinkPlan = NO_THINK
) -> list[int]:
    """The prompt's tokens (with its images', `api.media`)."""
    try:
        messages = harmony_messages(messages) if think.harmony else messages
        text = engine.template.render(
            messages, add_generation_prompt=True, tools=tools, variables=think.variables
        )
        text += think.suffix
    except jinja2.TemplateError as exc:
        raise BadRequest(
            f"messages: the model's chat template refused them: {exc}", param="messages"
        ) from None
    if IMAGE_SLOT in text:
        return tokenize_with_images(engine, text)
    return engine.tokenize_prompt(text)


def chat_sampling(
    engine: Engine, body: api.ChatRequest, plan: ToolPlan | None, think: ThinkPlan = NO_THINK
) -> SamplingParams:
    params = sampling_params(body, engine.config.flags.ctx_size, n_vocab=engine.model.n_vocab)
    grammar = format_grammar(params, body.response_format, "response_format")
    if plan is not None and plan.is_offered:
        if grammar is not None:
            raise BadRequest(
                "tools: tools with response_format, grammar or json_schema are not supported; "
                "use tool_choice none, or one of them",
                param="tools",
            )
        grammar = tool_grammar(plan)
    elif plan is not None and grammar is None:
        grammar = tool_grammar(plan)  # "none": plain text
    raw, default = body.grammar is not None, engine.config.flags.grammar
    grammar = answer_grammar(
        grammar, raw=raw, on=think.on, inside=think.inside, default=default, harmony=think.harmony
    )
    top = (body.top_logprobs or 0) if body.logprobs else None
    budget = think_budget(think, body.thinking_budget_tokens)
    return dataclasses.replace(params, grammar=grammar, top_logprobs=top, **budget)


def chat_think(engine: Engine, caps: ToolCaps, body: api.ChatRequest) -> ThinkPlan:
    flags = engine.config.flags
    return request_plan(
        caps.think,
        engine.config.model_name,
        budget=flags.reasoning_budget,
        fmt=flags.reasoning_format,
        kwargs=body.chat_template_kwargs,
        effort=body.reasoning_effort,
        request_fmt=body.reasoning_format,
    )


def checked(engine: Engine, params: SamplingParams) -> SamplingParams:
    """`params` once llama.cpp has parsed its grammar, if it has one."""
    if params.grammar is not None:
        engine.model.check_grammar(params.grammar)
    return params


def prepare_chat(
    engine: Engine, caps: ToolCaps, body: api.ChatRequest
) -> tuple[ToolPlan | None, list[int], SamplingParams, ThinkPlan]:
    """The tool plan, the prompt's tokens, the sampling and the thinking of a chat (off
    the loop)."""
    plan = tool_plan(body.tools, body.tool_choice, body.parallel_tool_calls, caps)
    think = chat_think(engine, caps, body)
    messages, template_tools = chat_messages(body.messages, plan, caps)
    if body.juggler_prompt is None:
        prompt = render(engine, messages, template_tools, think)
    else:  # a created model's TEMPLATE, rendered by the router
        prompt = engine.tokenize_prompt(body.juggler_prompt)
    return plan, prompt, checked(engine, chat_sampling(engine, body, plan, think)), think


def prepare_completion(
    engine: Engine, body: api.CompletionRequest
) -> tuple[list[int], SamplingParams]:
    prompt = engine.tokenize_prompt(body.prompt_text())
    params = sampling_params(body, engine.config.flags.ctx_size, n_vocab=engine.model.n_vocab)
    return prompt, checked(engine, dataclasses.replace(params, top_logprobs=body.logprobs))


async def chat(
    engine: Engine, caps: ToolCaps, body: api.ChatRequest, request: Request, *, inline: bool = False
) -> Any:
    """`inline`: prepare the request on the event loop (a small one, `fast_lane`)."""
    t0 = time.perf_counter()
    engine.require_llm()
    if inline:
        plan, prompt, params, think = prepare_chat(engine, caps, body)
    else:
        plan, prompt, params, think = await run_in_threadpool(prepare_chat, engine, caps, body)
    await ensure_connected(request)
    n = body.num_choices
    sinks = await start_choices(
        engine,
        prompt,
        choice_params(params, n),
        t0,
        stream=body.stream,
        adapter=adapter_ref(body.juggler_adapter),
        request=request,
    )
    name, piece = engine.config.model_name, engine.model.piece
    rid = shape.new_id("chatcmpl")
    wants_logprobs = params.top_logprobs is not None
    if not body.stream:
        finals = await collect(sinks, request)
        out, made = [], [Choice(i, plan, think) for i in range(n)]
        for i, ev in enumerate(finals):
            c = made[i]
            c.feed(ev)
            out.append(
                {
                    "index": i,
                    "message": c.message(),
                    "logprobs": chat_logprobs(c.logprobs, piece) if wants_logprobs else None,
                    "finish_reason": c.finish_reason(ev.finish_reason),
                    **stop_fields(ev),
                }
            )
        use = shape.choices_usage([ev.stats for ev in finals])
        if think.reasons:
            use = with_reasoning(use, engine.model.tokenize, (c.reasoning for c in made))
        return shape.chat_response(rid, name, out, use)
    created = int(time.time())
    choices = [Choice(i, plan, think) for i in range(n)]

    def chunk(c: Choice, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        lps = c.take_logprobs()
        logprobs = chat_logprobs(lps, piece) if wants_logprobs and lps else None
        return shape.chat_chunk(rid, name, created, delta, finish, index=c.index, logprobs=logprobs)

    contents = [
        sse.Template(shape.chat_chunk(rid, name, created, {"content": sse.SLOT}, index=i))
        for i in range(n)
    ]

    def frames_of(c: Choice, ev: StreamEvent) -> list[bytes]:
        out = []
        for delta in c.feed(ev):
            if not wants_logprobs and len(delta) == 1 and "content" in delta:
                out.append(contents[c.index](delta["content"]))  # a token's text
            else:
                out.append(sse.data(chunk(c, delta)))
        if ev.kind is EventKind.DONE:
            last = chunk(c, {}, c.finish_reason(ev.finish_reason))
            last["choices"][0].update(stop_fields(ev))
            out.append(sse.data(last))
        return out

    def tail(stats: list[RequestStats | None]) -> bytes:
        if not body.include_usage:
            return sse.DONE
        use = shape.choices_usage(stats)
        if think.reasons:
            use = with_reasoning(use, engine.model.tokenize, (c.reasoning for c in choices))
        kind = "chat.completion.chunk"
        return sse.data(shape.usage_chunk(rid, name, created, kind, use)) + sse.DONE

    head = b"".join(sse.data(chunk(c, {"role": "assistant", "content": ""})) for c in choices)
    body_frames = event_frames(sinks, lambda i, ev: frames_of(choices[i], ev), tail, head)
    return sse_response(body_frames, sinks)


async def completions(
    engine: Engine, body: api.CompletionRequest, request: Request, *, inline: bool = False
) -> Any:
    t0 = time.perf_counter()
    engine.require_llm()
    if inline:
        prompt, params = prepare_completion(engine, body)
    else:
        prompt, params = await run_in_threadpool(prepare_completion, engine, body)
    await ensure_connected(request)
    n = body.num_choices
    sinks = await start_choices(
        engine,
        prompt,
        choice_params(params, n),
        t0,
        stream=body.stream,
        adapter=adapter_ref(body.juggler_adapter),
        request=request,
    )
    name, piece = engine.config.model_name, engine.model.piece
    rid = shape.new_id("cmpl")
    wants_logprobs = body.logprobs is not None
    if not body.stream:
        finals = await collect(sinks, request)
        out = [
            {
                "index": i,
                "text": ev.text,
                "logprobs": completion_logprobs(ev.logprobs, piece) if wants_logprobs else None,
                "finish_reason": openai_finish(ev.finish_reason),
            }
            for i, ev in enumerate(finals)
        ]
        use = shape.choices_usage([ev.stats for ev in finals])
        return shape.completion_response(rid, name, out, use)
    created = int(time.time())
    texts = [
        sse.Template(shape.completion_chunk(rid, name, created, sse.SLOT, index=i))
        for i in range(n)
    ]

    def frame_of(i: int, ev: StreamEvent, offsets: list[int]) -> bytes:
        done = ev.kind is EventKind.DONE
        if not done and not wants_logprobs:
            return texts[i](ev.text)  # a token's text
        logprobs = None
        if wants_logprobs:
            logprobs = completion_logprobs(ev.logprobs, piece, offsets[i])
            offsets[i] += sum(len(t) for t in logprobs["tokens"])
        finish = openai_finish(ev.finish_reason) if done else None
        return sse.data(
            shape.completion_chunk(rid, name, created, ev.text, finish, index=i, logprobs=logprobs)
        )

    offsets = [0] * n

    def frames_of(i: int, ev: StreamEvent) -> list[bytes]:
        if ev.text or ev.kind is EventKind.DONE or ev.logprobs:
            return [frame_of(i, ev, offsets)]
        return []

    def tail(stats: list[RequestStats | None]) -> bytes:
        if not body.include_usage:
            return sse.DONE
        use = shape.choices_usage(stats)
        return sse.data(shape.usage_chunk(rid, name, created, "text_completion", use)) + sse.DONE

    return sse_response(event_frames(sinks, frames_of, tail), sinks)
