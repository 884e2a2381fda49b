"""A Modelfile's TEMPLATE turned into prompt text, as Ollama's `template.Execute` does.
Pure.

ollama/ollama docs/template.md: `System`, `Prompt`, `Response`, `Messages` (`Role`,
`Content`, `ToolCalls`), `Tools`. As Ollama:
- a template that uses `.Messages` is rendered once, with all messages (consecutive
  messages of one role joined by a blank line) and `.System` the system messages joined;
- any other is rendered once per exchange (system, prompt, response) of the history, and
  for the last one only up to its `{{ .Response }}` ("text after this variable is
  omitted"); a template that names neither `.Messages` nor `.Response` has
  `{{ .Response }}` added at its end (so earlier answers are part of the prompt).
`check` renders a new template with sample data, so what Juggler cannot render is a 400
at create time, naming it. In core: every face that serves a created model renders its
TEMPLATE (`template_prompt`; Ollama's routes, and `modelfile_requests` for the others).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from juggler.errors import BadRequest, NotImplementedParam
from juggler.router.core.gorender import render
from juggler.router.core.gotemplate import Node, Operand, TemplateError, parse


def _identifiers(nodes: list[Node]) -> set[str]:
    out: set[str] = set()

    def ops(pipe: list[list[Operand]]) -> None:
        for cmd in pipe:
            for op in cmd:
                out.update(p.lower() for p in op.path)
                if op.sub:
                    ops(op.sub)

    for n in nodes:
        ops(n.pipe)
        out |= _identifiers(n.body) | _identifiers(n.orelse)
    return out


def _mentions_response(pipe: list[list[Operand]]) -> bool:
    return any(
        "Response" in op.path or (op.sub is not None and _mentions_response(op.sub))
        for cmd in pipe
        for op in cmd
    )


def _cut(nodes: list[Node], state: list[bool]) -> list[Node]:
    """The nodes up to the first `.Response` (in Ollama's walk order: each node's body,
    then its else), which goes too; state[0] says whether it was found."""
    out: list[Node] = []
    for n in nodes:
        if state[0]:
            break
        if n.kind == "print" and _mentions_response(n.pipe):
            state[0] = True
            break
        if n.kind in ("if", "with", "range"):
            body = _cut(n.body, state)
            orelse = [] if state[0] else _cut(n.orelse, state)
            n = Node(n.kind, pipe=n.pipe, body=body, orelse=orelse, names=n.names)
        out.append(n)
    return out


class PromptTemplate:
    def __init__(self, text: str) -> None:
        """Raises TemplateError naming what Juggler cannot read."""
        self.text = text
        self.nodes = parse(text)
        names = _identifiers(self.nodes)
        self.uses_messages = "messages" in names
        if not self.uses_messages and "response" not in names:
            response = Operand("field", base=".", path=("Response",))
            self.nodes = [*self.nodes, Node("print", pipe=[[response]])]
        self.last = _cut(self.nodes, [False])

    def prompt(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt for OpenAI-style chat messages (`role`, `content`, maybe
        `tool_calls`); raises TemplateError."""
        system, collated = _collate(messages)
        if self.uses_messages:
            return render(self.nodes, _data(system, "", "", [_message(m) for m in collated]))
        out: list[str] = []
        system = prompt = response = ""
        for m in collated:
            role, content = m["role"], m["content"]
            if role == "system":
                if prompt or response:
                    out.append(render(self.nodes, _data(system, prompt, response, [])))
                    system = prompt = response = ""
                system = content
            elif role == "user":
                if response:
                    out.append(render(self.nodes, _data(system, prompt, response, [])))
                    system = prompt = response = ""
                prompt = content
            elif role == "assistant":
                response = content
        out.append(render(self.last, _data(system, prompt, response, [])))
        return "".join(out)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _collate(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = {**m, "content": _text(m.get("content"))}
        if msg["role"] == "system":
            system.append(msg["content"])
        if out and out[-1]["role"] == msg["role"] and msg["role"] != "tool":
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + msg["content"]}
        else:
            out.append(msg)
    return "\n\n".join(system), out


def _message(m: dict[str, Any]) -> dict[str, Any]:
    calls = []
    for c in m.get("tool_calls") or []:
        fn = c.get("function", {})
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args)
        calls.append({"Function": {"Name": fn.get("name", ""), "Arguments": args}})
    return {
        "Role": m["role"],
        "Content": m["content"],
        "ToolCalls": calls,
        "ToolName": m.get("name", ""),
        "Images": [],
        "Thinking": "",
    }


def _data(system: str, prompt: str, response: str, messages: list[Any]) -> dict[str, Any]:
    return {
        "System": system,
        "Prompt": prompt,
        "Response": response,
        "Suffix": "",
        "Messages": messages,
        "Tools": [],
        "Think": False,
        "IsThinkSet": False,
    }


_SAMPLE: list[dict[str, Any]] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a", "tool_calls": []},
    {"role": "user", "content": "u2"},
]


def check(text: str, param: str = "template") -> PromptTemplate:
    """The template, rendered once with sample messages; a 400 naming what Juggler
    cannot read or render."""
    try:
        template = PromptTemplate(text)
        template.prompt(_SAMPLE)
        template.prompt(_SAMPLE[1:2])
    except TemplateError as exc:
        raise BadRequest(f"{param}: {exc}", param=param) from None
    return template


def template_prompt(template: str, messages: list[dict[str, Any]], tools: Any) -> str:
    """OpenAI chat `messages` rendered through a TEMPLATE (text only, no tools)."""
    if tools:
        raise NotImplementedParam(
            "tools",
            "this model has a TEMPLATE of its own, and Juggler reads tool calls only with "
            "the model's chat template",
        )
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else []
        if any(isinstance(p, dict) and p.get("type") != "text" for p in parts):
            raise NotImplementedParam(
                "images", "this model has a TEMPLATE of its own, which renders text only"
            )
    try:
        return PromptTemplate(template).prompt(messages)
    except TemplateError as exc:
        raise BadRequest(f"template: {exc}", param="template") from None
