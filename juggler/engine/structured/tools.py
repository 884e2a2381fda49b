"""Tool calling, prompt side: how tools, earlier tool calls and tool results reach the
chat template, and the grammar that makes the model's tool calls always parse.

Two formats for the model's calls (`ToolSyntax`):

- HERMES, where the model's own template renders tools in the `<tool_call>` convention
  (Qwen 2.5/3, Hermes, SmolLM3 and many others). The template gets `tools` and the
  conversation in Hugging Face's form; the model writes each call as
  `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
- GENERIC, for every other template: the tools are described in the system message and
  the model answers with exactly `{"tool_calls": [{"name": ..., "arguments": {...}}]}`
  (earlier calls appear in the conversation in the same form; tool results as messages
  of role "tool", or "user" where the template knows no tool role).

Either way a grammar holds the output to the format and each function's `parameters`
schema, so a call always parses: with tool_choice "required" or a named function the
output must be calls (of that function); with "auto" it is calls or plain text (which
may then not start with the format's opening character); with "none" the output is
such plain text. Pure functions; `tool_stream` parses the output.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from juggler.api.openai import ChatMessage
from juggler.api.structured import FunctionDef, Tool, ToolChoice
from juggler.engine.llama.chat import ChatTemplate
from juggler.engine.structured.grammar import converter, finish, guard, visit_schema
from juggler.engine.thinking.template import ThinkCaps, think_caps
from juggler.errors import BadRequest

_PROBE = "juggler_probe_function"
_DOTALL = r"[\U00000000-\U0010FFFF]"


class ToolSyntax(enum.Enum):
    GENERIC = "generic"
    HERMES = "hermes"


@dataclass(frozen=True)
class ToolCaps:
    """What a chat template does with tools (probed once, when the engine starts)."""

    #: It renders `tools` itself, in the `<tool_call>` convention.
    hermes: bool = False
    #: It renders messages of role "tool".
    tool_role: bool = True
    #: What it does with a reasoning model's thinking.
    think: ThinkCaps = field(default_factory=ThinkCaps)


def template_caps(template: ChatTemplate) -> ToolCaps:
    def renders(messages: list[dict[str, Any]], needle: str, **kw: Any) -> bool:
        try:
            out = template.render(messages, add_generation_prompt=True, **kw)
        except Exception:  # a template may raise on anything it does not expect
            return False
        return needle in out

    user = {"role": "user", "content": "hi"}
    tools = [{"type": "function", "function": {"name": _PROBE, "parameters": {}}}]
    native = renders([user], _PROBE, tools=tools) and "<tool_call>" in template.source
    role = renders([user, {"role": "tool", "content": _PROBE}], _PROBE)
    return ToolCaps(hermes=native, tool_role=role, think=think_caps(template))


@dataclass(frozen=True)
class ToolPlan:
    """The tools of one request and what the model may do with them."""

    functions: tuple[FunctionDef, ...]
    #: "auto", "required", "none", or the name of the one function it must call.
    choice: str
    parallel: bool
    syntax: ToolSyntax

    @property
    def is_offered(self) -> bool:
        return bool(self.functions) and self.choice != "none"


def tool_plan(
    tools: Sequence[Tool] | None,
    choice: ToolChoice | None,
    parallel: bool | None,
    caps: ToolCaps,
    param: str = "tools",
) -> ToolPlan | None:
    """The request's plan, or None without tools; BadRequest for a bad choice."""
    if not tools:
        return None
    functions = tuple(t.function for t in tools)
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise BadRequest(f"{param}: function names must be unique", param=param)
    picked: str
    if choice is None or isinstance(choice, str):
        picked = choice or "auto"
    else:
        picked = choice.function.name
        if picked not in names:
            raise BadRequest(f"tool_choice: no function named {picked!r}", param="tool_choice")
    syntax = ToolSyntax.HERMES if caps.hermes else ToolSyntax.GENERIC
    return ToolPlan(functions, picked, parallel is not False, syntax)


# -- the conversation ------------------------------------------------------------------
def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def generic_calls_text(calls: Sequence[tuple[str, Any]]) -> str:
    """Calls (name, arguments) as the GENERIC format writes them."""
    items = [{"name": name, "arguments": args} for name, args in calls]
    return json.dumps({"tool_calls": items}, ensure_ascii=False)


def instructions(plan: ToolPlan) -> str:
    """The GENERIC format's system text: the tools and how to call them."""
    lines = ["You can call these functions (arguments as JSON schemas):"]
    for f in plan.functions:
        spec: dict[str, Any] = {"name": f.name}
        if f.description:
            spec["description"] = f.description
        spec["parameters"] = f.parameters or {"type": "object"}
        lines.append(json.dumps(spec, ensure_ascii=False))
    example = generic_calls_text([("<function name>", {"<argument>": "<value>"})])
    lines.append(f"To call functions, reply with only this JSON: {example}")
    lines.append("Otherwise, reply in plain text. Function results come back as tool messages.")
    return "\n".join(lines)


def chat_messages(
    messages: Sequence[ChatMessage], plan: ToolPlan | None, caps: ToolCaps
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The conversation as the template reads it, and the `tools` to give the template
    (None: none). Earlier tool calls and tool results take the plan's format. The tools
    are described whatever tool_choice says (it only changes the grammar), so that turns
    with another tool_choice still share their prompt's prefix (and its KV)."""
    syntax = plan.syntax if plan is not None else ToolSyntax.HERMES if caps.hermes else None
    native = syntax is ToolSyntax.HERMES
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "system" if m.role == "developer" else m.role
        text = m.text()
        if m.tool_calls:
            for c in m.tool_calls:
                names[c.id] = c.function.name
            calls = [(c.function.name, _arguments(c.function.arguments)) for c in m.tool_calls]
            if native:
                out.append(
                    {
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": n, "arguments": a},
                            }
                            for c, (n, a) in zip(m.tool_calls, calls, strict=True)
                        ],
                    }
                )
            else:
                call_text = generic_calls_text(calls)
                out.append(
                    {"role": "assistant", "content": f"{text}\n{call_text}" if text else call_text}
                )
            if m.reasoning_content is not None:  # the template keeps or drops it
                out[-1]["reasoning_content"] = m.reasoning_content
            continue
        if role == "tool":
            name = names.get(m.tool_call_id or "", m.name or "")
            if native:
                out.append(
                    {"role": "tool", "content": text, "tool_call_id": m.tool_call_id, "name": name}
                )
            elif caps.tool_role:
                out.append({"role": "tool", "content": text})
            else:
                out.append(
                    {"role": "user", "content": f"Result of {name or 'the function'}: {text}"}
                )
            continue
        out.append({"role": role, "content": text, **({"name": m.name} if m.name else {})})
        if m.reasoning_content is not None:
            out[-1]["reasoning_content"] = m.reasoning_content
    if plan is None or not plan.functions:
        return out, None
    if native:
        tools = [
            {"type": "function", "function": f.model_dump(exclude_none=True)}
            for f in plan.functions
        ]
        return out, tools
    text = instructions(plan)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}"}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out, None


# -- the grammar -------------------------------------------------------------------------
def _local_defs(params: dict[str, Any], prefix: str, param: str) -> dict[str, Any]:
    """`params` made resolvable inside a call object: local refs point under
    `properties/arguments`, and `$defs` / `definitions` get names unique to this tool
    (the converter names a referenced rule after the last part of its ref)."""
    defs = re.compile(r"^#/(\$defs|definitions)/")

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            ref = defs.sub(lambda m: f"#/{m.group(1)}/{prefix}", ref)
            out["$ref"] = "#/properties/arguments/" + ref[2:]
        return out

    try:
        doc: dict[str, Any] = walk(params)
    except RecursionError:
        raise BadRequest(f"{param}: the JSON schema is nested too deeply", param=param) from None
    for key in ("$defs", "definitions"):
        if isinstance(doc.get(key), dict):
            doc[key] = {f"{prefix}{k}": v for k, v in doc[key].items()}
    return doc


def tool_grammar(plan: ToolPlan) -> str:
    """The grammar of the plan's output. Under tool_choice "none" that is plain text that
    does not open a call (a model that saw calls in the conversation tends to write one
    as text)."""
    text_start = "[^{ \\t\\r\\n]" if plan.syntax is ToolSyntax.GENERIC else "[^< \\t\\r\\n]"
    text = f"text ::= {text_start} {_DOTALL}*"
    if not plan.is_offered:
        return guard(f"root ::= text\n{text}", param="tools", client=False)
    conv = converter()
    alternatives = []
    for i, f in enumerate(plan.functions):
        if plan.choice not in ("auto", "required", f.name):
            continue
        param = f"tools.{i}.function.parameters"
        params = _local_defs(f.parameters or {"type": "object"}, f"t{i}-", param)
        call = {
            "type": "object",
            "properties": {"name": {"const": f.name}, "arguments": params},
            "required": ["name", "arguments"],
        }
        alternatives.append(visit_schema(conv, call, f"call{i}", param=param))
    if plan.syntax is ToolSyntax.GENERIC:
        first, more, end = '"{\\"tool_calls\\": [" space call', '"," space call', '"]}"'
    else:
        first = '"<tool_call>\\n" call "\\n</tool_call>"'
        more, end = first.replace('"<tool_call>', '"\\n<tool_call>'), ""
    calls = f"{first} ({more})*" if plan.parallel else first
    rules = [f"call ::= {' | '.join(alternatives)}", f"calls ::= {calls} {end}".rstrip()]
    if plan.choice == "auto":
        rules += ["root ::= calls | text", text]
    else:
        rules.append("root ::= calls")
    return finish(conv, param="tools", extra="\n".join(rules))
