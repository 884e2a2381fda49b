"""Ollama's Modelfile as text: parsed (the legacy `/api/create` `modelfile` field) and
written (`/api/show`'s `modelfile`). Pure.

ollama/ollama docs/modelfile.md: `# comment`, `INSTRUCTION arguments`, instructions in
any case, a value on one line or quoted (in double quotes, or three of them; either may
span lines); `FROM` (required), `PARAMETER name value` (repeated for `stop`), `TEMPLATE`, `SYSTEM`,
`ADAPTER`, `LICENSE`, `MESSAGE role text` (system, user or assistant), `REQUIRES`.
Ollama's `DRAFT`, `RENDERER` and `PARSER` are refused by name (Juggler has no draft
model of another file nor Ollama's renderers), as is any other instruction. Parameter
values get the types Ollama gives them (`parameter_value`); an unknown name is a 400.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from juggler.errors import BadRequest, NotImplementedParam

INT_PARAMS = frozenset(
    [
        "num_keep",
        "seed",
        "num_predict",
        "top_k",
        "repeat_last_n",
        "num_ctx",
        "num_batch",
        "num_gpu",
        "main_gpu",
        "num_thread",
        "mirostat",
    ]
)
FLOAT_PARAMS = frozenset(
    [
        "top_p",
        "min_p",
        "typical_p",
        "temperature",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
        "tfs_z",
        "mirostat_tau",
        "mirostat_eta",
    ]
)
BOOL_PARAMS = frozenset(
    [
        "numa",
        "use_mmap",
        "use_mlock",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "embedding_only",
        "penalize_newline",
    ]
)
_INSTRUCTIONS = ("from", "parameter", "template", "system", "adapter", "license", "message")
_REFUSED = {
    "draft": "Juggler drafts from the prompt (speculative decoding), not from a second model",
    "renderer": "Juggler renders TEMPLATE or the model's own chat template",
    "parser": "Juggler reads tool calls its own way",
}
_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Command:
    name: str  # "from", "parameter", ...
    args: str
    key: str = ""  # the parameter's name, or the message's role
    line: int = 0


def _bad(line: int, what: str, param: str = "modelfile") -> BadRequest:
    return BadRequest(f"modelfile line {line}: {what}", param=param)


def _unquote(s: str) -> tuple[str, bool]:
    if s.startswith('"""'):
        return (s[3:-3], True) if len(s) >= 6 and s.endswith('"""') else ("", False)
    if s.startswith('"'):
        return (s[1:-1], True) if len(s) >= 2 and s.endswith('"') else ("", False)
    return s, True


_HEAD = re.compile(r"([A-Za-z]+)[ \t]+")


def parse(text: str) -> list[Command]:
    """The commands of a Modelfile; a 400 naming the line and what is wrong."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[Command] = []
    i = 0
    while i < len(lines):
        number, raw = i + 1, lines[i].lstrip(" \t")
        i += 1
        if not raw.strip() or raw.startswith("#"):
            continue
        head = _HEAD.match(raw)
        word = (head.group(1) if head else raw.split()[0]).lower()
        if word in _REFUSED:
            raise NotImplementedParam(word.upper(), _REFUSED[word])
        if head is None or word not in (*_INSTRUCTIONS, "requires"):
            raise _bad(number, f"unknown instruction {raw.split()[0]!r}")
        rest, key = raw[head.end() :], ""
        if word in ("parameter", "message"):
            key_match = re.match(r"([A-Za-z0-9_]+)[ \t]+", rest)
            if key_match is None:
                raise _bad(number, f"{word.upper()} needs a name and a value")
            key, rest = key_match.group(1), rest[key_match.end() :]
            if word == "message" and key not in _ROLES:
                raise _bad(number, f"message role must be system, user or assistant, not {key!r}")
        value = rest.strip(" \t")
        while True:
            args, closed = _unquote(value.strip())
            if closed:
                break
            if i >= len(lines):
                raise _bad(number, "a quoted value is not closed")
            value += "\n" + lines[i]
            i += 1
        out.append(Command(word, args, key, number))
    if not any(c.name == "from" for c in out):
        raise BadRequest("modelfile: no FROM line", param="modelfile")
    return out


def parameter_value(name: str, value: Any, param: str) -> Any:
    """A parameter's value with Ollama's type (a Modelfile's text, or JSON's value); a
    400 naming `param` for an unknown name or a value of the wrong type."""
    try:
        if name in INT_PARAMS:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if name in FLOAT_PARAMS:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if name in BOOL_PARAMS:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            if not isinstance(value, bool):
                raise ValueError
            return value
        if name == "stop":
            stops = value if isinstance(value, list) else [value]
            if not all(isinstance(s, str) for s in stops):
                raise ValueError
            return list(stops)
    except (ValueError, TypeError):
        raise BadRequest(f"{param}: {value!r} is not a valid value", param=param) from None
    raise NotImplementedParam(param, "Ollama defines no such parameter")


def create_fields(text: str) -> dict[str, Any]:
    """A Modelfile as the JSON fields of `/api/create` (what Ollama's CLI sends): `from`,
    `parameters`, `template`, `system`, `adapters` (paths, as written), `license`,
    `messages`, and `requires`."""
    out: dict[str, Any] = {}
    params: dict[str, Any] = {}
    messages: list[dict[str, str]] = []
    licenses: list[str] = []
    adapters: list[str] = []
    for c in parse(text):
        if c.name == "from":
            out["from"] = c.args
        elif c.name == "parameter":
            value = parameter_value(c.key, c.args, f"PARAMETER {c.key}")
            params[c.key] = params.get(c.key, []) + value if c.key == "stop" else value
        elif c.name == "message":
            messages.append({"role": c.key, "content": c.args})
        elif c.name == "license":
            licenses.append(c.args)
        elif c.name == "adapter":
            adapters.append(c.args)
        else:  # template, system, requires: the last one counts
            out[c.name] = c.args
    for key, value in (("parameters", params), ("messages", messages), ("license", licenses)):
        if value:
            out[key] = value
    if adapters:
        out["adapters"] = adapters
    return out


# -- writing ----------------------------------------------------------------------------------
def quote(s: str) -> str:
    """As Ollama writes a value: quoted when it spans lines or has edge spaces."""
    if "\n" in s or s.startswith(" ") or s.endswith(" "):
        return f'"""{s}"""' if '"' in s else f'"{s}"'
    return s


def value_text(value: Any) -> str:
    """A parameter value as Go's %#v writes it (`/api/show`'s `parameters`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parameter_lines(params: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) pairs, one per stop sequence, in name order."""
    out: list[tuple[str, Any]] = []
    for name in sorted(params):
        values = params[name] if isinstance(params[name], list) else [params[name]]
        out.extend((name, v) for v in values)
    return out


def parameters_text(params: dict[str, Any]) -> str:
    return "\n".join(f"{n:<30} {value_text(v)}" for n, v in parameter_lines(params))


def modelfile_text(
    name: str,
    source: str,
    *,
    template: str = "",
    system: str = "",
    params: dict[str, Any] | None = None,
    adapter: str = "",
    licenses: list[str] | None = None,
    messages: list[dict[str, str]] | None = None,
) -> str:
    lines = [
        '# Modelfile generated by "ollama show"',
        "# To build a new Modelfile based on this, replace FROM with:",
        f"# FROM {name}",
        "",
        f"FROM {source}",
    ]
    if template:
        lines.append(f"TEMPLATE {quote(template)}")
    if system:
        lines.append(f"SYSTEM {quote(system)}")
    if adapter:
        lines.append(f"ADAPTER {adapter}")
    for n, v in parameter_lines(params or {}):
        lines.append(f"PARAMETER {n} {quote(v) if isinstance(v, str) else value_text(v)}")
    lines.extend(f"LICENSE {quote(text)}" for text in licenses or [])
    lines.extend(f"MESSAGE {m['role']} {quote(m['content'])}" for m in messages or [])
    return "\n".join(lines) + "\n"
