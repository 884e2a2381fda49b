"""Other streams keep decoding while an image is encoded (issue 51: "In the engine,
not beside it ... other streams keep decoding while an image is encoded").

A projector large enough that its encoding takes many decodes' time (224x224 images,
256 tokens, a 6-block tower 384 wide); a text stream decodes while an image request
arrives. With `--image-encode background` the worker runs decodes while the encoding
runs beside it; with `inline` it runs none (the stream waits for the encoding).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.conftest import Backend, start_backend
from tests.vision.images import data_url
from tests.vision.projector import make_projector

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big_projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_projector(
        tmp_path_factory.mktemp("mmproj") / "mmproj-big.gguf",
        image_size=224,
        patch_size=14,
        n_embd=384,
        n_ff=1536,
        n_layer=6,
        n_head=6,
        f16=True,
    )


def _stream(url: str, content: Any, tokens: int, seen: list[str]) -> None:
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    with (
        httpx.Client(timeout=300) as c,
        c.stream("POST", url + "/v1/chat/completions", json=body) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    seen.append("t")


def _image_beside_a_stream(b: Backend) -> dict[str, Any]:
    seen: list[str] = []
    t = threading.Thread(target=_stream, args=(b.url, "Tell a long story.", 400, seen))
    t.start()
    try:
        while len(seen) < 5:  # the stream decodes
            t.join(0.05)
            assert t.is_alive()
        image = [
            {"type": "image_url", "image_url": {"url": data_url("PNG", seed=77, size=224)}},
            {"type": "text", "text": "Describe it."},
        ]
        _stream(b.url, image, 1, [])
    finally:
        t.join()
    with b.client() as c:
        stats: dict[str, Any] = c.get("/stats").json()
    return stats


@pytest.mark.parametrize("mode", ["background", "inline"])
def test_other_streams_decode_while_an_image_is_encoded(
    smol_path: Path, big_projector: Path, tmp_path: Path, mode: str
) -> None:
    b = start_backend(
        smol_path,
        "smol-big-vision",
        tmp_path,
        "--ctx-size",
        "4096",
        "--mmproj",
        str(big_projector),
        "--image-encode",
        mode,
    )
    try:
        stats = _image_beside_a_stream(b)
    finally:
        b.stop()
    assert stats["images_encoded_total"] == 1
    beside = stats["decodes_beside_image_encodes_total"]
    if mode == "background":
        assert beside > 0, stats
    else:
        assert beside == 0, stats
