"""Small test images in each format the servers take (issue 51)."""

from __future__ import annotations

import base64
import io

from PIL import Image


def picture(seed: int = 1, size: int = 64) -> Image.Image:
    """A deterministic RGB picture; another `seed`, another picture."""
    img = Image.new("RGB", (size, size), (seed % 256, 90, 200))
    if size > 512:  # a large one (for the size limit): one colour, quick to make
        return img
    img.putdata(
        [
            ((x * 7 + seed * 31) % 256, (y * 5 + seed * 17) % 256, (x * y + seed) % 256)
            for y in range(size)
            for x in range(size)
        ]
    )
    return img


def encoded(fmt: str = "PNG", seed: int = 1, size: int = 64) -> bytes:
    buf = io.BytesIO()
    img = picture(seed, size)
    if fmt == "GIF":
        frames = [img, picture(seed + 1, size)]
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    else:
        img.save(buf, format=fmt)
    return buf.getvalue()


def b64(fmt: str = "PNG", seed: int = 1, size: int = 64) -> str:
    return base64.b64encode(encoded(fmt, seed, size)).decode()


def data_url(fmt: str = "PNG", seed: int = 1, size: int = 64) -> str:
    return f"data:image/{fmt.lower()};base64,{b64(fmt, seed, size)}"
