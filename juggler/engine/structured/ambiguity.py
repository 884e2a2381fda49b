"""Refusing the patterns and grammars that make llama.cpp's grammar explode.

llama.cpp follows a grammar by keeping every way the text so far can be parsed (its
"stacks"). A bounded repetition whose body can match nothing, as in the issue-27 pattern
`^(a|aa|aaa|a?){1,1000}(b|c)*$` or `(a{0,5}){1,50}`, is spelled out as `n` nested
optional copies, and the ways to spread a text over them grow combinatorially: measured
on SmolLM2's vocabulary, `(a?){1,200}` takes 71 s for its fourth token in one C call that
nothing can interrupt, `(a|aa|aaa|a?){1,30}` 0.8 s a token and growing. The same
repetition with a body that cannot be empty (`(a|aa|aaa){1,1000}`), an unbounded one
(`(a?)*`, kept as one recursive rule) or a short bound (`(a?){1,8}`) stays in the
milliseconds. So that one shape is refused before anything is compiled: a 400 naming the
limit (`MAX_NULLABLE_REPEAT`), and the equivalent form that is cheap.

Pure functions over the text: a small parser for the regular expressions the JSON-schema
converter accepts and for GBNF (rule references resolved for emptiness by a fixpoint).
What they cannot parse they leave to the converter and to llama.cpp's own parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from juggler.errors import BadRequest

#: Largest upper bound of a repetition whose body can match the empty string.
MAX_NULLABLE_REPEAT = 8


class GrammarTooAmbiguous(BadRequest):
    code = "grammar_too_complex"


@dataclass
class _Node:
    """`kind`: "lit" (never empty unless `empty`), "ref" (a GBNF rule), "alt" (alternatives
    of sequences), "rep" (body `kids[0]` repeated lo..hi times; hi None: unbounded)."""

    kind: str
    kids: list[list[_Node]] = field(default_factory=list)
    empty: bool = False
    name: str = ""
    lo: int = 0
    hi: int | None = None
    text: str = ""


def _nullable(node: _Node, rules: dict[str, bool]) -> bool:
    """Whether `node` can match the empty string (rules: what is known of each rule).
    Iterative, children before parents: a hostile text may nest thousands deep."""
    known: dict[int, bool] = {}
    stack: list[tuple[_Node, bool]] = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if n.kind == "lit":
            known[id(n)] = n.empty
        elif n.kind == "ref":
            known[id(n)] = rules.get(n.name, False)
        elif not ready:
            stack.append((n, True))
            stack.extend((kid, False) for seq in n.kids for kid in seq)
        else:
            seqs = [all(known[id(kid)] for kid in seq) for seq in n.kids]
            known[id(n)] = (n.lo == 0 or seqs[0]) if n.kind == "rep" else any(seqs)
    return known[id(node)]


def _seq_nullable(seq: list[_Node], rules: dict[str, bool]) -> bool:
    return all(_nullable(n, rules) for n in seq)


class _Builder:
    """Builds alternatives of sequences from a token stream, without recursion (a hostile
    text may nest thousands deep)."""

    def __init__(self) -> None:
        self.stack: list[tuple[list[list[_Node]], int]] = [([[]], 0)]
        self.reps: list[_Node] = []

    def atom(self, node: _Node) -> None:
        self.stack[-1][0][-1].append(node)

    def open(self, at: int) -> None:
        self.stack.append(([[]], at))

    def close(self, text: str) -> None:
        if len(self.stack) == 1:
            return  # unbalanced: the real parser reports it
        alts, at = self.stack.pop()
        self.atom(_Node("alt", kids=alts, text=text[at:]))

    def bar(self) -> None:
        self.stack[-1][0].append([])

    def quantify(self, lo: int, hi: int | None, text: str) -> None:
        seq = self.stack[-1][0][-1]
        if not seq:
            return
        body = seq.pop()
        rep = _Node("rep", kids=[[body]], lo=lo, hi=hi, text=body.text + text)
        seq.append(rep)
        self.reps.append(rep)

    def done(self) -> _Node:
        while len(self.stack) > 1:
            self.close("")
        return _Node("alt", kids=self.stack[0][0])


def _count(text: str, i: int) -> tuple[int, int | None, int] | None:
    """`{m}`, `{m,}`, `{m,n}` at text[i] (spaces allowed): (lo, hi, index after)."""
    end = text.find("}", i)
    if end < 0:
        return None
    parts = text[i + 1 : end].replace(" ", "").split(",")
    try:
        lo = int(parts[0]) if parts[0] else 0
        if len(parts) == 1:
            return lo, lo, end + 1
        hi = int(parts[1]) if parts[1] else None
    except ValueError:
        return None
    return (lo, hi, end + 1) if len(parts) == 2 else None


def _skip_class(text: str, i: int) -> int:
    """Index after the character class that starts at text[i] == "["."""
    i += 1
    if i < len(text) and text[i] == "^":
        i += 1
    if i < len(text) and text[i] == "]":
        i += 1
    while i < len(text) and text[i] != "]":
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _quantifier(b: _Builder, text: str, i: int) -> int | None:
    """Apply the quantifier at text[i], if any; the index after it."""
    c = text[i]
    if c in "*+?":
        b.quantify({"*": 0, "+": 1, "?": 0}[c], None if c != "?" else 1, c)
        return i + 1
    if c == "{" and (got := _count(text, i)) is not None:
        lo, hi, after = got
        b.quantify(lo, hi, text[i:after])
        return after
    return None


def _structure(b: _Builder, text: str, i: int) -> int | None:
    """Groups, alternatives and character classes, alike in both notations: the index
    after the one at text[i], or None when it is none of them."""
    c = text[i]
    if c == "(":
        b.open(i)
        return i + 1
    if c == ")":
        b.close(text[: i + 1])
        return i + 1
    if c == "|":
        b.bar()
        return i + 1
    if c == "[":
        end = _skip_class(text, i)
        b.atom(_Node("lit", text=text[i:end]))
        return end
    return None


def _regex(pattern: str) -> _Builder:
    b = _Builder()
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if (after := _quantifier(b, pattern, i)) is not None:
            i = after
            if i < n and pattern[i] in "?+":  # lazy / possessive
                i += 1
            continue
        if (after := _structure(b, pattern, i)) is not None:
            i = after
            if c == "(" and pattern.startswith("?:", i):
                i += 2
        elif c in "^$":
            i += 1
        else:
            end = i + (2 if c == "\\" else 1)
            b.atom(_Node("lit", text=pattern[i:end]))
            i = end
    return b


def _refuse(rep: _Node, bound: int, param: str, what: str) -> None:
    shown = rep.text if len(rep.text) <= 80 else rep.text[:77] + "..."
    raise GrammarTooAmbiguous(
        f"{param}: {what} repeats something that can match the empty string up to "
        f"{bound} times ({shown!r}); such a repetition is ambiguous and too costly to "
        f"follow (the limit is {MAX_NULLABLE_REPEAT} for a body that can be empty). "
        "Make the repeated part non-empty and let the count say how many, e.g. "
        "'(a|b){0,50}' instead of '(a?|b){1,50}'",
        param=param,
    )


def _check(reps: list[_Node], rules: dict[str, bool], param: str, what: str) -> None:
    for rep in reps:
        bound = rep.lo if rep.hi is None else rep.hi  # {m,} is m copies and a star
        if bound > MAX_NULLABLE_REPEAT and _seq_nullable(rep.kids[0], rules):
            _refuse(rep, bound, param, what)


def check_pattern(pattern: str, *, param: str) -> None:
    """GrammarTooAmbiguous when a JSON-schema `pattern` has the explosive shape."""
    b = _regex(pattern)
    b.done()
    _check(b.reps, {}, param, "the pattern")


def _gbnf_rules(grammar: str) -> tuple[dict[str, _Node], list[_Node]]:
    rules: dict[str, _Node] = {}
    reps: list[_Node] = []
    name = ""
    b = _Builder()
    i, n = 0, len(grammar)

    def finish() -> None:
        if name:
            rules[name] = b.done()
            reps.extend(b.reps)

    while i < n:
        c = grammar[i]
        if c in " \t\r\n":
            i += 1
        elif c == "#":
            while i < n and grammar[i] != "\n":
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and grammar[j] != '"':
                j += 2 if grammar[j] == "\\" else 1
            b.atom(_Node("lit", empty=j == i + 1, text=grammar[i : j + 1]))
            i = j + 1
        elif (after := _structure(b, grammar, i)) is not None:
            i = after
        elif c.isalnum() or c in "-_":
            j = i
            while j < n and (grammar[j].isalnum() or grammar[j] in "-_"):
                j += 1
            word = grammar[i:j]
            k = j
            while k < n and grammar[k] in " \t":
                k += 1
            if grammar.startswith("::=", k):
                finish()
                name, b = word, _Builder()
                i = k + 3
            else:
                b.atom(_Node("ref", name=word, text=word))
                i = j
        elif (after := _quantifier(b, grammar, i)) is not None:
            i = after
        else:
            b.atom(_Node("lit", text=c))
            i += 1
    finish()
    return rules, reps


def check_gbnf(grammar: str, *, param: str) -> None:
    """GrammarTooAmbiguous when a GBNF grammar repeats, with a large bound, a part that
    can match the empty string (rule references followed to a fixpoint)."""
    rules, reps = _gbnf_rules(grammar)
    users: dict[str, set[str]] = {}
    for name, body in rules.items():
        for ref in _refs(body):
            users.setdefault(ref, set()).add(name)
    nullable = dict.fromkeys(rules, False)
    todo = list(rules)
    while todo:  # each rule is looked at again only when one it uses turned nullable
        name = todo.pop()
        if not nullable[name] and _nullable(rules[name], nullable):
            nullable[name] = True
            todo.extend(users.get(name, ()))
    _check(reps, nullable, param, "the grammar")


def _refs(node: _Node) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind == "ref":
            found.add(n.name)
        for seq in n.kids:
            stack.extend(seq)
    return found
