"""Issue 24, items 3 and 3b without a model: Ollama's embedding rules (`truncate`,
`dimensions`) as pure functions, and `/api/show` for every model `/api/tags` lists on a
fresh home, on the real router app in-process."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from juggler.config import Settings
from juggler.errors import BadRequest, ContextOverflow
from juggler.registry.catalog import Registry
from juggler.router.app import create_app
from juggler.router.ollama import embed_rules as oe
from juggler.router.ollama import wire as ol

LOCAL = "http://127.0.0.1"


def test_the_context_an_input_must_fit_is_the_loaded_one_at_most_the_trained_one() -> None:
    """Ollama: `min(opts.NumCtx, kvData.ContextLength())`."""
    assert oe.context_limit(4096, 512) == 512
    assert oe.context_limit(256, 512) == 256
    assert oe.context_limit(2048, None) == 2048
    assert oe.context_limit(None, None) is None


def test_truncation_keeps_the_special_tokens_and_cuts_the_content() -> None:
    """ "truncates the end of each input to fit within context length": [CLS] and [SEP]
    (2 tokens here) stay, the content is cut to what is left."""
    assert oe.kept_tokens(n_with_specials=902, n_content=900, limit=512) == 510
    assert oe.kept_tokens(n_with_specials=12, n_content=10, limit=512) == 10
    with pytest.raises(ContextOverflow, match="after truncation"):
        oe.kept_tokens(n_with_specials=902, n_content=900, limit=2)


def test_dimensions_keep_the_first_values_normalized_again() -> None:
    """Ollama: `normalize(embedding[:req.Dimensions])` when fewer than the model's."""
    vector = [0.6, 0.8, 0.0, 0.0]
    assert oe.shorten(vector, None) == vector
    assert oe.shorten(vector, 4) == vector
    short = oe.shorten([0.5, 0.5, 0.5, 0.5], 2)
    assert len(short) == 2 and math.isclose(math.hypot(*short), 1.0)
    oe.check_dimensions(4, 4)
    with pytest.raises(BadRequest, match="384 dimensions") as err:
        oe.check_dimensions(1000, 384)
    assert err.value.param == "dimensions"


def test_truncate_true_is_accepted_and_dimensions_must_be_positive() -> None:
    """ "`/api/embed` refuses `truncate: true`, which is Ollama's documented default and
    what llm-ollama sends" -- the body takes it now."""
    assert ol.EmbedBody(model="m", input="x", truncate=True).truncate is True
    with pytest.raises(ValueError, match="dimensions"):
        ol.EmbedBody(model="m", input="x", dimensions=0)


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("JUGGLER_HOME", str(tmp_path / "home"))
    app = create_app(Settings(model=""), Registry(tmp_path / "home"))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as c:
        yield c


def test_every_model_tags_lists_answers_show_on_a_fresh_home(
    client: TestClient, tmp_path: Path
) -> None:
    """Issue 24, item 3: "`/api/show` answers 404 for a model that `/api/tags` lists (a
    packaged model not assembled yet) ... Whatever a list route shows must answer show."
    On a fresh home the packaged models are listed unassembled, each under its own digest
    (clients group names by digest); show assembles them and describes the real GGUF. A
    model with no file (a `command` model) is described from its catalog entry."""
    Registry(tmp_path / "home").add_user_model(
        "user.ext", checkpoint="", recipe="command", command="srv --port {port}"
    )
    listed = client.get("/api/tags").json()["models"]
    names = [m["name"] for m in listed]
    assert {"Gemma-3-270M-GGUF:latest", "all-MiniLM-L6-v2-GGUF:latest"} <= set(names)
    assert len({m["digest"] for m in listed}) == len(listed)
    assert not list((tmp_path / "home").glob("models/*/*.gguf")), "nothing assembled yet"
    shown = {}
    for name in names:
        r = client.post("/api/show", json={"model": name})
        assert r.status_code == 200, (name, r.text)
        shown[name] = r.json()
    mini = shown["all-MiniLM-L6-v2-GGUF:latest"]
    assert mini["capabilities"] == ["embedding"] and mini["details"]["family"] == "bert"
    assert mini["model_info"]["bert.context_length"] == 512
    assert shown["user.ext:latest"]["capabilities"] == ["completion", "tools"]
    gemma = shown["Gemma-3-270M-GGUF:latest"]
    assert gemma["details"]["family"] == "gemma3" and "completion" in gemma["capabilities"]
    assert client.post("/api/show", json={"model": "Qwen3-0.6B-GGUF"}).status_code == 404
