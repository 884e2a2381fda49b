"""Reading a request's images (PNG, JPEG, WebP, GIF's first frame: anything Pillow
reads) and tokenizing text whose image slots (`api.media.slot`) hold them (issue 51).
Any thread: the chat routes call it off the event loop, the session inputs on the
worker thread."""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING, Any

from juggler.api import media
from juggler.engine.llama.media import Picture, Projector
from juggler.errors import BadRequest, JugglerError

if TYPE_CHECKING:
    from juggler.engine.engine_config import EngineConfig

log = logging.getLogger(__name__)

#: Most pixels of one image (a larger one is refused, not shrunk: the projector resizes
#: what it takes to its own size anyway, and a decompression bomb stops here).
MAX_PIXELS = 50_000_000
#: Most images in one request.
MAX_IMAGES = 32


def read_picture(data: bytes) -> Picture:
    """Decode one image (its first frame) to RGB; BadRequest when it cannot be read or
    is too large."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise BadRequest("an image is empty", param="messages")
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > MAX_PIXELS or width < 1 or height < 1:
                raise BadRequest(
                    f"an image of {width}x{height} pixels is larger than {MAX_PIXELS} pixels",
                    param="messages",
                )
            img.seek(0)
            rgb = img.convert("RGB")
            return Picture(rgb.tobytes(), rgb.width, rgb.height)
    except BadRequest:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise BadRequest(f"an image could not be read: {exc}", param="messages") from None


def pictures_of(urls: list[str]) -> list[Picture]:
    if len(urls) > MAX_IMAGES:
        raise BadRequest(f"at most {MAX_IMAGES} images in one request", param="messages")
    out = []
    for url in urls:
        try:
            data = media.bytes_of(url)
        except ValueError as exc:
            raise BadRequest(f"image: {exc}", param="messages") from None
        out.append(read_picture(data))
    return out


def tokenize_text(model: Any, text: str, *, add_special: bool) -> list[int]:
    """`text`'s tokens, each image slot in it as the image's (any thread: the session
    inputs call it on the worker thread). BadRequest when the model takes no images."""
    if media.IMAGE_SLOT not in text:
        tokens: list[int] = model.tokenize(text, add_special=add_special)
        return tokens
    projector: Projector | None = getattr(model, "projector", None)
    if projector is None or not projector.vision:
        raise BadRequest("this model does not take images (it has no vision projector)")
    pictures = pictures_of(media.slots_of(text))
    marked = media.SLOT_RE.sub(lambda _: projector.marker, text)
    return projector.tokenize(marked, pictures, add_special=add_special)


def load_projector(config: EngineConfig, model: Any, *, on_gpu: bool) -> Projector | None:
    """The projector named by the config, loaded for `model` (and set as
    `model.projector`, where the workers find it); None without one."""
    if not config.mmproj:
        model.projector = None
        return None
    try:
        projector = Projector(
            config.mmproj,
            model.ptr,
            n_embd=int(model.n_embd),
            n_threads=config.n_threads,
            use_gpu=on_gpu,
        )
    except JugglerError as exc:
        if not config.mmproj_optional:
            raise
        log.warning("the projector beside the model was not loaded: %s", exc.message)
        model.projector = None
        return None
    log.info(
        "projector %s loaded (vision %s, audio %s)",
        config.mmproj,
        projector.vision,
        projector.audio,
    )
    model.projector = projector
    return projector
