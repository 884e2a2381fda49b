"""The part of Go's text/template that Ollama's prompt templates use (a Modelfile's
TEMPLATE), parsed and rendered in Python. Pure.

Built: text and `{{ pipeline }}` actions; `{{-` / `-}}` trimming; `{{/* comments */}}`;
`if` / `else if` / `else` / `end`, `range` (over a list, with `$i, $m :=` or `$m :=`,
and `else`), `with`; fields (`.System`, `.Role`, `$.Messages`, `$m.Content`), `.`, `$`,
string, number and boolean literals, parentheses, `|` pipes; the functions `eq ne lt le
gt ge and or not len index slice json print` (rendered by `gorender`). Anything else (`template`, `define`,
`block`, `break`, variable assignments, another function, a field the data does not
have) raises `TemplateError` naming it, at parse time where the text shows it, else at
render time (`prompt_template` renders a new template once with sample data, so the
create request gets the 400).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class TemplateError(ValueError):
    """A template Juggler cannot parse or render; the message names what."""


# -- parsing ---------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<raw>`[^`]*`)
    | (?P<num>-?\d+(?:\.\d+)?)
    | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
    | (?P<decl>:=|=)
    | (?P<punct>[()|,])
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}
FUNCTIONS = frozenset(
    [
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "and",
        "or",
        "not",
        "len",
        "index",
        "slice",
        "json",
        "print",
    ]
)


@dataclass
class Operand:
    kind: str  # "field" (base, path), "lit" (value), "func" (name), "pipe" (sub)
    base: str = ""  # ".", "$" or "$name"
    path: tuple[str, ...] = ()
    value: Any = None
    sub: list[list[Operand]] | None = None


Pipe = list[list[Operand]]  # commands, each a list of operands


@dataclass
class Node:
    kind: str  # "text", "print", "if", "range", "with"
    text: str = ""
    pipe: Pipe = field(default_factory=list)
    body: list[Node] = field(default_factory=list)
    orelse: list[Node] = field(default_factory=list)
    names: tuple[str, ...] = ()  # range's declared variables


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 5 < len(s):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _tokens(src: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(src):
        if not src[pos:].strip():
            break
        m = _TOKEN.match(src, pos)
        if m is None or m.end() == pos:
            raise TemplateError(f"cannot read {src[pos:].strip()[:20]!r} in {{{{ {src} }}}}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _pipe(tokens: list[tuple[str, str]], src: str) -> Pipe:
    """Commands separated by `|`; parentheses nest."""
    pos = 0

    def command() -> list[Operand]:
        nonlocal pos
        ops: list[Operand] = []
        while pos < len(tokens):
            kind, text = tokens[pos]
            if kind == "punct" and text in ")|":
                break
            pos += 1
            if kind == "str":
                ops.append(Operand("lit", value=_unescape(text[1:-1])))
            elif kind == "raw":
                ops.append(Operand("lit", value=text[1:-1]))
            elif kind == "num":
                ops.append(Operand("lit", value=float(text) if "." in text else int(text)))
            elif kind == "field":
                path = tuple(p for p in text.split(".") if p)
                ops.append(Operand("field", base=".", path=path))
            elif kind == "var":
                head, *rest = text.split(".")
                ops.append(Operand("field", base=head, path=tuple(rest)))
            elif kind == "word":
                if text in ("true", "false"):
                    ops.append(Operand("lit", value=text == "true"))
                elif text == "nil":
                    ops.append(Operand("lit", value=None))
                elif text in FUNCTIONS:
                    ops.append(Operand("func", value=text))
                else:
                    raise TemplateError(f"the function or keyword {text!r} is not supported")
            elif kind == "punct" and text == "(":
                ops.append(Operand("pipe", sub=pipeline()))
                if pos >= len(tokens) or tokens[pos][1] != ")":
                    raise TemplateError(f"unclosed ( in {{{{ {src} }}}}")
                pos += 1
            else:
                raise TemplateError(f"{text!r} is not supported in {{{{ {src} }}}}")
        if not ops:
            raise TemplateError(f"an empty command in {{{{ {src} }}}}")
        return ops

    def pipeline() -> Pipe:
        nonlocal pos
        cmds = [command()]
        while pos < len(tokens) and tokens[pos][1] == "|":
            pos += 1
            cmds.append(command())
        return cmds

    out = pipeline()
    if pos != len(tokens):
        raise TemplateError(f"unexpected {tokens[pos][1]!r} in {{{{ {src} }}}}")
    return out


def _range_head(src: str) -> tuple[tuple[str, ...], Pipe]:
    tokens = _tokens(src)
    decl = next((i for i, t in enumerate(tokens) if t[0] == "decl"), None)
    if decl is None:
        return (), _pipe(tokens, src)
    names = tuple(t[1] for t in tokens[:decl] if t[0] == "var")
    if tokens[decl][1] != ":=" or not 1 <= len(names) <= 2 or any("." in n for n in names):
        raise TemplateError(f"cannot read the range variables in {{{{ range {src} }}}}")
    return names, _pipe(tokens[decl + 1 :], src)


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)


def _lex(text: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", inside) items, trimming done."""
    items: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(text):
        chunk = text[pos : m.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if m.group(1):
            chunk = chunk.rstrip()
        items.append(("text", chunk))
        inside = m.group(2).strip()
        if not (inside.startswith("/*") and inside.endswith("*/")):
            items.append(("action", inside))
        trim_next, pos = bool(m.group(3)), m.end()
    tail = text[pos:]
    if "{{" in tail:
        raise TemplateError("an unclosed {{ action")
    items.append(("text", tail.lstrip() if trim_next else tail))
    return [i for i in items if i != ("text", "")]


def parse(text: str) -> list[Node]:
    """The template's nodes; raises TemplateError naming what is not supported."""
    items = _lex(text)
    pos = 0

    def block(in_block: bool, allow_else: bool) -> tuple[list[Node], str]:
        """Nodes until `end` or (`allow_else`) `else ...`; returns them and the closing
        action ("" at the end of the text, an error inside a block)."""
        nonlocal pos
        nodes: list[Node] = []
        while pos < len(items):
            kind, src = items[pos]
            pos += 1
            if kind == "text":
                nodes.append(Node("text", text=src))
                continue
            word, _, rest = src.partition(" ")
            word, rest = word.strip(), rest.strip()
            if word == "end" and not rest:
                if not in_block:
                    raise TemplateError("{{ end }} without a block")
                return nodes, "end"
            if word == "else":
                if not allow_else:
                    raise TemplateError("{{ else }} outside if, range or with")
                return nodes, src
            if word in ("if", "with"):
                nodes.append(branch(word, rest))
            elif word == "range":
                names, pipe = _range_head(rest)
                body, close = block(True, True)
                if close != "end" and close != "else":
                    raise TemplateError(f"{{{{ {close} }}}} in a range")
                orelse = block(True, False)[0] if close == "else" else []
                nodes.append(Node("range", pipe=pipe, body=body, orelse=orelse, names=names))
            elif word in ("template", "define", "block", "break", "continue"):
                raise TemplateError(f"{{{{ {word} }}}} is not supported")
            else:
                tokens = _tokens(src)
                if any(t[0] == "decl" for t in tokens):
                    raise TemplateError(f"variable assignments are not supported: {{{{ {src} }}}}")
                nodes.append(Node("print", pipe=_pipe(tokens, src)))
        if in_block:
            raise TemplateError("a block is missing its {{ end }}")
        return nodes, ""

    def branch(word: str, cond: str) -> Node:
        if not cond:
            raise TemplateError(f"{{{{ {word} }}}} without a condition")
        body, close = block(True, True)
        node = Node(word, pipe=_pipe(_tokens(cond), cond), body=body)
        rest = close[len("else") :].strip() if close != "end" else ""
        if close == "end":
            return node
        if not rest:
            node.orelse = block(True, False)[0]
            return node
        sub_word, _, sub_cond = rest.partition(" ")
        if sub_word not in ("if", "with"):
            raise TemplateError(f"{{{{ {close} }}}} is not supported")
        node.orelse = [branch(sub_word, sub_cond.strip())]
        return node

    return block(False, False)[0]
