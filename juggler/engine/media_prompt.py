"""A backend's images, as its routes see them (issue 51): a chat prompt with images
(refused, naming the model, where it has no projector) and what /stats says of them.
Loading the projector and reading images is `media_images`'s.

The images are read and tokenized where the rest of the prompt is prepared (off the
event loop, `http.openai_routes`); the worker that owns the sequence encodes and
decodes them (`worker.media_feed`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from juggler.engine.llama.media import Projector
from juggler.engine.media_images import tokenize_text
from juggler.errors import BadRequest

if TYPE_CHECKING:
    from juggler.engine.runtime import Engine

log = logging.getLogger(__name__)


def require_vision(engine: Engine) -> Projector:
    projector = engine.projector
    if projector is None or not projector.vision:
        raise BadRequest(
            f"model {engine.config.model_name} does not take images (it has no vision "
            "projector); send text only, or use a vision model",
            param="messages",
        )
    return projector


def tokenize_with_images(engine: Engine, text: str) -> list[int]:
    """A rendered chat prompt holding an image slot (`api.media.slot`) where each
    image goes."""
    require_vision(engine)
    bos = engine.template.bos_token
    add_special = engine.model.add_bos and not (bos and text.startswith(bos))
    return tokenize_text(engine.model, text, add_special=add_special)


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
        "decodes_beside_image_encodes_total": sum(f.decodes_beside for f in fed),
        "image_seconds_total": round(sum(f.media_s for f in fed), 6),
        "projector_bytes": projector.bytes,
    }
