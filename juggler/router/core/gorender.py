"""Rendering the templates `gotemplate` parses, as Go's text/template renders them (the
subset `gotemplate` reads): Go's truth, its comparison and logic functions, fields of
the data (a dict of Go field names; a field the data does not have is a TemplateError
naming it, where Go would print its zero value: Juggler says what it cannot provide).
Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from juggler.router.core.gotemplate import Node, Operand, Pipe, TemplateError


def truth(v: Any) -> bool:
    """Go's truth: false, 0, nil and empty strings, lists and maps are false."""
    return bool(v)


def _text(v: Any) -> str:
    if v is None:
        return "<no value>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str | int | float):
        return str(v)
    raise TemplateError(f"cannot print a {type(v).__name__} (use json)")


def _compare(name: str, a: Any, b: Any) -> bool:
    try:
        return bool({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[name])
    except TypeError:
        raise TemplateError(f"{name}: cannot compare {a!r} with {b!r}") from None


def _call(name: str, args: list[Any]) -> Any:
    if name == "eq":
        if len(args) < 2:
            raise TemplateError("eq needs two arguments")
        return any(args[0] == b for b in args[1:])
    if name == "ne" or name in ("lt", "le", "gt", "ge"):
        if len(args) != 2:
            raise TemplateError(f"{name} needs two arguments")
        return args[0] != args[1] if name == "ne" else _compare(name, *args)
    if name in ("and", "or"):
        if not args:
            raise TemplateError(f"{name} needs arguments")
        for a in args:  # Go returns the first false (and) / true (or) argument, or the last
            if truth(a) != (name == "and"):
                return a
        return args[-1]
    if name == "not":
        if len(args) != 1:
            raise TemplateError("not needs one argument")
        return not truth(args[0])
    if name == "len":
        if len(args) != 1 or not isinstance(args[0], str | list | dict):
            raise TemplateError("len needs one string, list or map")
        return len(args[0])
    if name == "json":
        return json.dumps(args[0] if len(args) == 1 else args, ensure_ascii=False)
    if name == "print":
        return "".join(_text(a) for a in args)
    return _index_or_slice(name, args)


def _index_or_slice(name: str, args: list[Any]) -> Any:
    if not args or not all(isinstance(a, int) for a in args[1:]):
        raise TemplateError(f"{name} needs a value and integer positions")
    seq, *at = args
    try:
        if name == "index":
            for i in at:
                seq = seq[i]
            return seq
        if not isinstance(seq, list | str) or len(at) > 2:
            raise TemplateError("slice needs a list or a string and at most two positions")
        return seq[at[0] if at else 0 : at[1] if len(at) > 1 else len(seq)]
    except (IndexError, KeyError, TypeError):
        raise TemplateError(f"{name}: position out of range") from None


@dataclass
class _Scope:
    dot: Any
    root: Any
    names: dict[str, Any]


def _field(value: Any, path: tuple[str, ...], shown: str) -> Any:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            raise TemplateError(f"the template uses {shown}, which Juggler does not provide")
        value = value[part]
    return value


def _operand(op: Operand, scope: _Scope) -> Any:
    if op.kind == "lit":
        return op.value
    if op.kind == "pipe":
        return _run(op.sub or [], scope)
    if op.base == ".":
        base = scope.dot
    elif op.base == "$":
        base = scope.root
    elif op.base in scope.names:
        base = scope.names[op.base]
    else:
        raise TemplateError(f"undefined variable {op.base}")
    return _field(base, op.path, op.base.rstrip(".") + "".join("." + p for p in op.path))


def _run(pipe: Pipe, scope: _Scope) -> Any:
    value: Any = None
    for i, cmd in enumerate(pipe):
        head = cmd[0]
        args = [_operand(op, scope) for op in cmd[1:]]
        if i:
            args.append(value)
        if head.kind == "func":
            value = _call(str(head.value), args)
        elif args:
            raise TemplateError("only a function takes arguments")
        else:
            value = _operand(head, scope)
    return value


def _render(nodes: list[Node], scope: _Scope, out: list[str]) -> None:
    for n in nodes:
        if n.kind == "text":
            out.append(n.text)
        elif n.kind == "print":
            out.append(_text(_run(n.pipe, scope)))
        elif n.kind in ("if", "with"):
            value = _run(n.pipe, scope)
            if not truth(value):
                _render(n.orelse, scope, out)
            elif n.kind == "if":
                _render(n.body, scope, out)
            else:
                _render(n.body, _Scope(value, scope.root, scope.names), out)
        else:  # range
            items = _run(n.pipe, scope)
            if items is None:
                items = []
            if not isinstance(items, list | dict):
                raise TemplateError(f"range over a {type(items).__name__}")
            pairs = list(items.items()) if isinstance(items, dict) else list(enumerate(items))
            for key, item in pairs:
                names = dict(scope.names)
                if len(n.names) == 2:
                    names[n.names[0]], names[n.names[1]] = key, item
                elif n.names:
                    names[n.names[0]] = item
                _render(n.body, _Scope(item, scope.root, names), out)
            if not pairs:
                _render(n.orelse, scope, out)


def render(nodes: list[Node], data: dict[str, Any]) -> str:
    """The template's text for `data` (a dict of Go field names); raises TemplateError."""
    out: list[str] = []
    _render(nodes, _Scope(data, data, {"$": data}), out)
    return "".join(out)
