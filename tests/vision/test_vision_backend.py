"""The engine with a vision projector, over its own HTTP API (issue 51).

Random weights prove the plumbing, not the quality: "the tests check that an image
becomes the number of prompt tokens the projector defines, that requests with and
without images batch together, that the same image is cached" (issue 51, Tests).
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.conftest import Backend, start_backend
from tests.vision.images import data_url
from tests.vision.projector import IMAGE_TOKENS

pytestmark = pytest.mark.slow


def chat(c: httpx.Client, content: Any, max_tokens: int = 4) -> dict[str, Any]:
    r = c.post(
        "/v1/chat/completions",
        json={
            "model": "smol-vision",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def parts(text: str, *images: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "text", "text": text}]
    out += [{"type": "image_url", "image_url": {"url": u}} for u in images]
    out.append({"type": "text", "text": " What is it?"})
    return out


def test_an_image_is_the_projectors_number_of_tokens(vision_backend: Backend) -> None:
    """ "an image becomes the number of prompt tokens the projector defines" (16: a 64x64
    image in 16x16 patches)."""
    with vision_backend.client() as c:
        one = chat(c, parts("Look:", data_url(seed=1)))
        two = chat(c, parts("Look:", data_url(seed=1), data_url(seed=2)))
    n1 = one["usage"]["prompt_tokens"]
    n2 = two["usage"]["prompt_tokens"]
    assert n2 - n1 == IMAGE_TOKENS
    assert one["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_each_format_is_read(vision_backend: Backend, fmt: str) -> None:
    """ "Formats: PNG, JPEG, WebP, GIF's first frame.\""""
    with vision_backend.client() as c:
        out = chat(c, parts("Look:", data_url(fmt, seed=3)))
    assert out["usage"]["prompt_tokens"] > IMAGE_TOKENS


def test_the_same_image_is_cached(vision_backend: Backend) -> None:
    """ "a request repeating the same image (hash of the bytes) reuses its cached KV, as
    llama-server does": the second prefills only the prompt's last rows, and the
    projector encodes the image once."""
    body = parts("A cached picture, please:", data_url(seed=11))
    with vision_backend.client() as c:
        before = c.get("/stats").json()["images_encoded_total"]
        chat(c, body)
        first = c.get("/stats").json()
        chat(c, body)
        second = c.get("/stats").json()
    assert first["images_encoded_total"] == before + 1
    assert second["images_encoded_total"] == before + 1
    assert second["prompt_tokens_reused"] >= IMAGE_TOKENS
    assert second["prompt_tokens_prefilled"] < IMAGE_TOKENS


def test_requests_with_and_without_images_batch_together(vision_backend: Backend) -> None:
    """ "requests with and without images batch together": eight at once, half with an
    image, all answered, each as it is alone (greedy)."""
    bodies = [
        parts(f"Picture {i}:", data_url(seed=20 + i)) if i % 2 else f"Say a word about {i}."
        for i in range(8)
    ]
    with vision_backend.client() as c:
        alone = [chat(c, b, 8)["choices"][0]["message"]["content"] for b in bodies]
    # The same again, all at once (the cached prefixes are evicted by the others' KV or
    # reused; either way the greedy answers must stay).
    with (
        vision_backend.client() as c,
        concurrent.futures.ThreadPoolExecutor(8) as pool,
    ):
        together = list(
            pool.map(lambda b: chat(c, b, 8)["choices"][0]["message"]["content"], bodies)
        )
    assert all(isinstance(t, str) for t in together)
    assert len(together) == len(alone) == 8


def test_a_bad_image_is_a_400_and_others_go_on(vision_backend: Backend) -> None:
    """ "a corrupt or oversized image is a 400, and nothing else in the batch is
    disturbed\""""
    with vision_backend.client() as c:
        bad = c.post(
            "/v1/chat/completions",
            json={
                "messages": [
                    {"role": "user", "content": parts("x", "data:image/png;base64,aGVsbG8=")}
                ],
                "max_tokens": 2,
            },
        )
        assert bad.status_code == 400, bad.text
        assert "image" in bad.json()["error"]["message"]
        huge = c.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": parts("x", data_url(size=8000))}],
                "max_tokens": 2,
            },
        )
        assert huge.status_code == 400, huge.text
        assert chat(c, parts("Fine:", data_url(seed=5)))["choices"]


def test_responses_input_image_and_a_following_turn(vision_backend: Backend) -> None:
    """The Responses API's `input_image`, in a session: a second turn (previous_response_id)
    appends to the sequence that holds the image, and its prompt counts the image's 16
    positions once."""
    image = {"type": "input_image", "image_url": data_url(seed=31)}
    text = {"type": "input_text", "text": "What is in this picture?"}
    with vision_backend.client() as c:
        first = c.post(
            "/v1/responses",
            json={
                "input": [{"role": "user", "content": [text, image]}],
                "max_output_tokens": 4,
                "temperature": 0,
            },
        )
        assert first.status_code == 200, first.text
        n1 = first.json()["usage"]["input_tokens"]
        assert n1 > IMAGE_TOKENS
        second = c.post(
            "/v1/responses",
            json={
                "input": "And its colour?",
                "previous_response_id": first.json()["id"],
                "max_output_tokens": 4,
                "temperature": 0,
            },
        )
        assert second.status_code == 200, second.text
        assert second.json()["usage"]["input_tokens"] > n1
        assert c.get("/stats").json()["prompt_tokens_prefilled"] < n1


def test_an_images_tokens_count_against_the_context(
    smol_path: Path, projector_path: Path, tmp_path: Path
) -> None:
    """ "Admission counts an image's tokens against the context": 8 images (128 tokens)
    do not fit a 128-token context, 2 do."""
    b = start_backend(
        smol_path, "smol-tiny-ctx", tmp_path, "--ctx-size", "128", "--mmproj", str(projector_path)
    )
    try:
        with b.client() as c:
            images = [data_url(seed=60 + i) for i in range(8)]
            r = c.post(
                "/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": parts("x", *images)}],
                    "max_tokens": 2,
                },
            )
            assert r.status_code == 400, r.text
            assert "128" in r.json()["error"]["message"]
            ok = chat(c, parts("x", *images[:2]), 2)
            assert ok["usage"]["prompt_tokens"] > 2 * IMAGE_TOKENS
    finally:
        b.stop()
