"""Issue 49 part 4: a Modelfile's TEMPLATE, Go template syntax as Ollama's docs define it
(docs/template.md, docs/modelfile.md), rendered to prompt text (`gotemplate`,
`gorender`, `prompt_template`). Expected texts are what Go's text/template and Ollama's
`template.Execute` give for these templates."""

from __future__ import annotations

from typing import Any

import pytest

from juggler.errors import BadRequest
from juggler.router.core.gorender import render
from juggler.router.core.gotemplate import TemplateError, parse
from juggler.router.core.prompt_template import PromptTemplate, check

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Why?"},
]
CHATML = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
LLAMA3 = """{{- if .System }}<|start_header_id|>system<|end_header_id|>

{{ .System }}<|eot_id|>
{{- end }}
{{- range .Messages }}{{ if ne .Role "system" }}<|start_header_id|>{{ .Role }}<|end_header_id|>

{{ .Content }}<|eot_id|>{{ end }}
{{- end }}<|start_header_id|>assistant<|end_header_id|>

"""


def r(text: str, data: dict[str, Any]) -> str:
    return render(parse(text), data)


def test_fields_conditions_and_trimming() -> None:
    """Go: "{{- " trims the white space before the action, " -}}" the white space after."""
    data = {"System": "S", "Prompt": "P", "Empty": "", "N": 0, "L": [1, 2]}
    assert r("a  {{- .System -}}  \n b", data) == "aSb"
    assert r("{{ if .System }}yes{{ end }}|{{ if .Empty }}no{{ else }}else{{ end }}", data) == (
        "yes|else"
    )
    assert r('{{ if eq .Prompt "Q" }}1{{ else if eq .Prompt "P" }}2{{ else }}3{{ end }}', data) == (
        "2"
    )
    assert r("{{ if and .System (not .N) }}t{{ end }}{{ if or .Empty .N }}f{{ end }}", data) == "t"
    assert r(
        "{{/* a comment */}}{{ len .L }} {{ .L | len }} {{ json .L }} {{ index .L 1 }}", data
    ) == ("2 2 [1, 2] 2")
    assert r(
        "{{ with .System }}<{{ . }}>{{ end }}{{ with .Empty }}x{{ else }}-{{ end }}", data
    ) == ("<S>-")
    assert r('{{ "a\\tb" }}{{ `raw\\n` }}{{ 3 }}{{ true }}', data) == "a\tbraw\\n3true"


def test_range_with_variables_dollar_and_else() -> None:
    msgs = [{"Role": "user", "Content": "a"}, {"Role": "assistant", "Content": "b"}]
    data = {"Messages": msgs, "System": "S", "None": []}
    text = (
        "{{ range $i, $m := .Messages }}{{ $i }}{{ $m.Role }}{{ $.System }}{{ .Content }};{{ end }}"
    )
    assert r(text, data) == "0userSa;1assistantSb;"
    assert r("{{ range .None }}x{{ else }}empty{{ end }}", data) == "empty"
    assert r("{{ range $m := .Messages }}{{ $m.Content }}{{ end }}", data) == "ab"
    last = "{{ range $i, $_ := .Messages }}{{ if eq (len (slice $.Messages $i)) 1 }}last:{{ .Content }}{{ end }}{{ end }}"
    assert r(last, data) == "last:b"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{{ template "x" }}', "template"),
        ('{{ define "x" }}y{{ end }}', "define"),
        ('{{ printf "%d" 1 }}', "printf"),
        ("{{ $x := 1 }}", "assignments"),
        ("{{ if .System }}x", "missing its {{ end }}"),
        ("{{ end }}", "without a block"),
        ("{{ else }}", "else"),
        ("{{ .System", "unclosed"),
        ("{{ .Nope }}", ".Nope"),
        ("{{ range .Messages }}{{ .Colour }}{{ end }}", ".Colour"),
        ("{{ $y }}", "undefined variable $y"),
        ("{{ .Messages }}", "cannot print a list"),
    ],
)
def test_what_juggler_cannot_render_is_a_400_naming_it(text: str, named: str) -> None:
    """Issue 49: "a broken template" gets "a 400 naming" it."""
    with pytest.raises(BadRequest, match=named.replace("{", r"\{").replace("$", r"\$")):
        check(text)


def test_a_messages_template_renders_the_whole_chat_once() -> None:
    """template.Execute: with `.Messages` the template runs once; `.System` is the system
    messages joined."""
    assert PromptTemplate(CHATML).prompt(CHAT) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert PromptTemplate(LLAMA3).prompt(CHAT[:2]) == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_a_prompt_template_runs_per_exchange_and_stops_at_the_last_response() -> None:
    """docs/modelfile.md: `{{ .Response }}`: "When generating a response, text after this
    variable is omitted"; a template without it gets it appended (template.Parse)."""
    t = PromptTemplate(
        "{{ if .System }}[{{ .System }}]{{ end }}U:{{ .Prompt }} A:{{ .Response }}</s>"
    )
    assert t.prompt(CHAT) == "[Be brief.]U:Hi A:Hello</s>U:Why? A:"
    plain = PromptTemplate("{{ .System }} {{ .Prompt }}")  # .Response appended
    assert plain.prompt(CHAT) == "Be brief. HiHello Why?"
    assert plain.prompt([{"role": "user", "content": "x"}]) == " x"


def test_consecutive_messages_of_a_role_are_joined() -> None:
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert PromptTemplate("{{ .Prompt }}").prompt(two) == "a\n\nb"
    assert PromptTemplate(CHATML).prompt(two).count("<|im_start|>user") == 1


def test_errors_are_template_errors() -> None:
    with pytest.raises(TemplateError):
        parse("{{ if }}x{{ end }}")
