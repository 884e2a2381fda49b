"""Issue 49 part 4, live: "`/api/create` (and `ollama create -f Modelfile`) honours
`SYSTEM`, `TEMPLATE` [...], `PARAMETER` [...], `MESSAGE` and `ADAPTER`; `/api/show` returns
them as Ollama does." The real `ollama` package against a real router and SmolLM2.

Each Modelfile instruction is seen taking effect by comparing greedy answers and prompt
token counts with the same request spelled out on the base model: a created model with
SYSTEM answers as the base model does with that system message (same text, same
`prompt_eval_count`), a TEMPLATE as a raw prompt rendered by hand, and so on. Speculative
drafts are off (`--speculative off`) so that repeated prompts keep identical greedy text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.engine.conftest import smollm2_path
from tests.engine.gguf_models import make_lora

pytestmark = pytest.mark.slow
GREEDY: dict[str, Any] = {"temperature": 0, "seed": 42}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("modelfile"),
        "--model",
        DEFAULT_MODEL,
        "--ctx-size",
        "1024",
        "--max-loaded-models",
        "2",
        "--llamacpp-args",
        "--speculative off",
    )
    try:
        srv.wait_for(lambda h: h.get("model_loaded") == DEFAULT_MODEL, timeout_s=180)
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def client(server: RunningServer) -> Iterator[ollama.Client]:
    with ollama.Client(host=server.base_url, timeout=300) as c:
        yield c


def test_system_and_parameters_shape_the_answer_and_requests_override_them(
    client: ollama.Client,
) -> None:
    """SYSTEM is the system message (the same prompt tokens as the base model given it);
    PARAMETER temperature 0, seed and num_predict are the model's defaults ("num_predict:
    Maximum number of tokens to predict"), a request's options win."""
    system = "You are a pirate. Answer like a pirate."
    made = client.create(
        "pirate", from_=DEFAULT_MODEL, system=system, parameters={**GREEDY, "num_predict": 5}
    )
    assert made.status == "success"
    question = [{"role": "user", "content": "Where is the treasure?"}]
    got = client.chat("pirate", messages=question)
    assert got.eval_count == 5 and got.done_reason == "length"
    spelled = client.chat(
        DEFAULT_MODEL,
        messages=[{"role": "system", "content": system}, *question],
        options={**GREEDY, "num_predict": 5},
    )
    assert got.message.content == spelled.message.content
    assert got.prompt_eval_count == spelled.prompt_eval_count
    bare = client.chat(DEFAULT_MODEL, messages=question, options={**GREEDY, "num_predict": 5})
    # without it, SmolLM2's template puts its own default system prompt there
    assert bare.prompt_eval_count != got.prompt_eval_count
    assert bare.message.content != got.message.content
    longer = client.chat("pirate", messages=question, options={"num_predict": 9})
    assert (longer.eval_count or 0) > 5 or longer.done_reason == "stop"
    assert (longer.message.content or "").startswith(got.message.content or "")
    # /api/generate takes the SYSTEM too, unless the request has its own.
    gen = client.generate("pirate", prompt="Where is the treasure?")
    assert gen.response == got.message.content


def test_a_template_renders_the_prompt_as_written(client: ollama.Client) -> None:
    """TEMPLATE: "The full prompt template to be sent to the model": the answer and the
    prompt's token count are those of the rendered text sent raw to the base model."""
    template = "{{ if .System }}{{ .System }}\n{{ end }}Question: {{ .Prompt }}\nAnswer:"
    client.create(
        "qa",
        from_=DEFAULT_MODEL,
        template=template,
        system="Answer in one word.",
        parameters={**GREEDY, "num_predict": 6},
    )
    rendered = "Answer in one word.\nQuestion: What colour is the sky?\nAnswer:"
    raw = client.generate(
        DEFAULT_MODEL, prompt=rendered, raw=True, options={**GREEDY, "num_predict": 6}
    )
    gen = client.generate("qa", prompt="What colour is the sky?")
    assert gen.response == raw.response and gen.prompt_eval_count == raw.prompt_eval_count
    chat = client.chat("qa", messages=[{"role": "user", "content": "What colour is the sky?"}])
    assert chat.message.content == raw.response
    # a request's own template replaces the model's, as Ollama's generate allows
    own = client.generate("qa", prompt="What colour is the sky?", template="{{ .Prompt }}")
    plain = client.generate(
        DEFAULT_MODEL,
        prompt="What colour is the sky?",
        raw=True,
        options={**GREEDY, "num_predict": 6},
    )
    assert own.response == plain.response and own.prompt_eval_count == plain.prompt_eval_count


def test_messages_are_history_before_the_request(client: ollama.Client) -> None:
    """MESSAGE: "a message history for the model to use when responding"."""
    history = [
        {"role": "user", "content": "Is Toronto in Canada?"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "Is Sacramento in Canada?"},
        {"role": "assistant", "content": "no"},
    ]
    client.create(
        "canada", from_=DEFAULT_MODEL, messages=history, parameters={**GREEDY, "num_predict": 4}
    )
    question = {"role": "user", "content": "Is Ontario in Canada?"}
    got = client.chat("canada", messages=[question])
    spelled = client.chat(
        DEFAULT_MODEL, messages=[*history, question], options={**GREEDY, "num_predict": 4}
    )
    assert got.message.content == spelled.message.content
    assert got.prompt_eval_count == spelled.prompt_eval_count


def test_show_returns_the_modelfile_and_tags_list_the_models(
    client: ollama.Client, server: RunningServer
) -> None:
    client.create(
        "shown",
        from_=DEFAULT_MODEL,
        system="Be brief.",
        template="{{ .Prompt }}",
        parameters={"temperature": 0.5, "stop": ["<|im_end|>", "User:"], "num_ctx": 512},
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        license="MIT",
    )
    shown = client.show("shown")
    assert shown.template == "{{ .Prompt }}"
    assert shown.modelfile is not None
    for line in (
        "SYSTEM Be brief.",
        "TEMPLATE {{ .Prompt }}",
        "PARAMETER temperature 0.5",
        "PARAMETER stop User:",
        "PARAMETER num_ctx 512",
        "MESSAGE user hi",
        "MESSAGE assistant hello",
        "LICENSE MIT",
    ):
        assert line in shown.modelfile.splitlines(), (line, shown.modelfile)
    assert shown.parameters is not None and '"User:"' in shown.parameters
    with server.client() as c:
        body = c.post("/api/show", json={"model": "shown"}).json()
        assert body["system"] == "Be brief." and body["license"] == "MIT"
        assert body["messages"][1] == {"role": "assistant", "content": "hello"}
        assert c.get("/api/v1/models/shown").json()["recipe_options"] == {"ctx_size": 512}
    names = [m.model for m in client.list().models]
    assert "shown:latest" in names
    # A model made from it inherits the Modelfile, given fields replace theirs.
    client.create("shown2", from_="shown", system="Be verbose.")
    again = client.show("shown2")
    assert again.template == "{{ .Prompt }}" and "SYSTEM Be verbose." in (again.modelfile or "")
    client.copy("shown2", "shown3")
    assert "SYSTEM Be verbose." in (client.show("shown3").modelfile or "")
    client.delete("shown3")
    with pytest.raises(ollama.ResponseError):
        client.show("shown3")
    book = json.loads((server.home / "modelfiles.json").read_text())
    assert "shown3" not in book and book["shown"]["system"] == "Be brief."


def test_an_adapter_runs_with_the_created_model_on_every_route(
    client: ollama.Client, server: RunningServer, tmp_path: Path
) -> None:
    """ADAPTER: "a fine tuned LoRA adapter that should apply to the base model" (uploaded
    as a blob, as `ollama create` does): the created model answers as the base model with
    that adapter registered through seed 004's API does, on Ollama's and OpenAI's routes."""
    base = smollm2_path()
    assert base is not None
    lora = make_lora(base, tmp_path / "mf-lora.gguf", seed=5)
    digest = client.create_blob(lora)
    client.create("tuned", from_=DEFAULT_MODEL, adapters={"mf-lora.gguf": digest})
    prompt = "The capital of France is"
    opts = {**GREEDY, "num_predict": 8}
    tuned = client.generate("tuned", prompt=prompt, raw=True, options=opts).response
    plain = client.generate(DEFAULT_MODEL, prompt=prompt, raw=True, options=opts).response
    with server.client() as c:
        r = c.post("/adapters/ref", json={"path": str(lora), "base_model": DEFAULT_MODEL})
        assert r.status_code == 200, r.text
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "seed": 42}
        ref = c.post("/v1/completions", json={**body, "model": "ref"}).json()
        via_openai = c.post("/v1/completions", json={**body, "model": "tuned"}).json()
        assert tuned != plain
        assert tuned == ref["choices"][0]["text"] == via_openai["choices"][0]["text"]
        assert "ADAPTER " in (client.show("tuned").modelfile or "")
        client.delete("tuned")
        ids = {a["id"] for a in c.get("/v1/models").json()["data"]}
        assert "tuned.adapter" not in ids and "ref" in ids


def test_bad_modelfile_lines_are_400s_naming_them(
    server: RunningServer, client: ollama.Client
) -> None:
    """Issue 49: "a Modelfile line Juggler cannot honour, a broken template) get a 400
    naming them"."""
    with pytest.raises(ollama.ResponseError) as err:
        client.create("bad", from_=DEFAULT_MODEL, parameters={"mirostat": 2})
    assert err.value.status_code == 400 and "mirostat" in err.value.error
    with pytest.raises(ollama.ResponseError) as err:
        client.create("bad", from_=DEFAULT_MODEL, template="{{ range .Messages }}")
    assert err.value.status_code == 400 and "{{ end }}" in err.value.error
    with server.client() as c:
        r = c.post("/api/create", json={"name": "bad", "modelfile": f"FROM {DEFAULT_MODEL}\nFOO 1"})
        assert r.status_code == 400 and "FOO" in r.json()["error"]
        # the legacy field works too
        modelfile = f'FROM {DEFAULT_MODEL}\nPARAMETER num_predict 3\nPARAMETER temperature 0\nSYSTEM """Be brief."""'
        r = c.post("/api/create", json={"name": "legacy", "modelfile": modelfile, "stream": False})
        assert r.status_code == 200, r.text
        r = c.post("/api/generate", json={"model": "legacy", "prompt": "Hi", "stream": False})
        assert r.json()["eval_count"] == 3
    assert "bad:latest" not in [m.model for m in client.list().models]


def test_a_created_model_and_its_adapter_survive_a_restart(tmp_path: Path) -> None:
    """Created models "persist like other user models": after a restart the model is
    listed, shows its Modelfile and still has its adapter registered."""
    base = smollm2_path()
    assert base is not None
    lora = make_lora(base, tmp_path / "keep-lora.gguf", seed=6)
    first = start_server(tmp_path)  # nothing loaded: create and show need no backend
    try:
        with ollama.Client(host=first.base_url, timeout=120) as c:
            c.create(
                "keep",
                from_=DEFAULT_MODEL,
                system="Be brief.",
                parameters={"temperature": 0.25, "stop": ["END"]},
                adapters={"keep-lora.gguf": c.create_blob(lora)},
            )
    finally:
        first.stop()
    second = start_server(tmp_path)
    try:
        with ollama.Client(host=second.base_url, timeout=120) as c:
            assert "keep:latest" in [m.model for m in c.list().models]
            text = c.show("keep").modelfile or ""
            assert "SYSTEM Be brief." in text and "PARAMETER stop END" in text
            assert "PARAMETER temperature 0.25" in text and "ADAPTER " in text
        with second.client() as h:
            ids = {a["id"] for a in h.get("/v1/models").json()["data"]}
            assert "keep.adapter" in ids
    finally:
        second.stop()
