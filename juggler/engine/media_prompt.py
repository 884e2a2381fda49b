"""A backend's images (issue 51): loading the projector with the model, reading the
images of a request (PNG, JPEG, WebP, GIF's first frame, anything Pillow reads) and
tokenizing a rendered prompt with them.

The images are read and tokenized where the rest of the prompt is prepared (off the
event loop, `http.openai_routes`); the worker that owns the sequence encodes and
decodes them (`worker.media_feed`).
"""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING, Any

from juggler.api import media
from juggler.engine.llama.media import Picture, Projector
from juggler.errors import BadRequest, JugglerError

if TYPE_CHECKING:
    from juggler.engine.engine_config import EngineConfig
    from juggler.engine.runtime import Engine

log = logging.getLogger(__name__)

#: Most pixels of one image (a larger one is refused, not shrunk: the projector resizes
#: what it takes to its own size anyway, and a decompression bomb stops here).
MAX_PIXELS = 50_000_000
#: Most images in one request.
MAX_IMAGES = 32


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


def require_vision(engine: Engine) -> Projector:
    projector = engine.projector
    if projector is None or not projector.vision:
        raise BadRequest(
            f"model {engine.config.model_name} does not take images (it has no vision "
            "projector); send text only, or use a vision model",
            param="messages",
        )
    return projector


def tokenize_with_images(engine: Engine, text: str, urls: list[str]) -> list[int]:
    """A rendered chat prompt holding `media.IMAGE_SLOT` where each image goes."""
    projector = require_vision(engine)
    pictures = pictures_of(urls)
    bos = engine.template.bos_token
    add_special = engine.model.add_bos and not (bos and text.startswith(bos))
    return projector.tokenize(
        text.replace(media.IMAGE_SLOT, projector.marker), pictures, add_special=add_special
    )


def media_counters(engine: Engine) -> dict[str, Any]:
    """What /stats says of images: whether the model takes them, how many the projector
    encoded and the workers decoded into sequences, and the seconds that took."""
    projector = engine.projector
    if projector is None:
        return {"vision": False}
    feeds = [getattr(getattr(w, "decoder", None), "media", None) for w in engine.workers]
    fed = [f for f in feeds if f is not None]
    return {
        "vision": projector.vision,
        "audio": projector.audio,
        "images_encoded_total": projector.num_encodes,
        "image_encode_seconds_total": round(projector.encode_s, 6),
        "images_decoded_total": sum(f.num_images for f in fed),
        "image_seconds_total": round(sum(f.media_s for f in fed), 6),
        "projector_bytes": projector.bytes,
    }
