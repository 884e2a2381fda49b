"""Ollama's `options` and `keep_alive` as Juggler's sampling, load and residency
options: one `OllamaRequestOptions` per request, read once (by `request.request_options`)
and handed on. Pure.

- `options`: sampling options become OpenAI fields (`num_predict` -> `max_tokens`,
  `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `repeat_penalty`, `repeat_last_n`,
  `presence_penalty`, `frequency_penalty`, `stop`); load options become load options
  (`num_ctx` -> `ctx_size`, `num_batch` -> `--batch-size`, `num_thread` ->
  `--threads`, `num_gpu` -> `n_gpu_layers`: the layers offloaded to the GPU, 0 none,
  issue 48). An option Juggler cannot honour is a
  400 naming it, unless its value is what Juggler does anyway (`mirostat: 0`, ...).
- `keep_alive` (seconds, or a Go duration "5m", "1h30m"): 0 unloads the model once
  idle, a duration is its idle timeout, a negative value keeps it.
- Lemonade's load options (`/api/v1/load`'s, `core/load_options.py`) may ride in
  `options` too, as Lemonade's Ollama routes allow: only `num_ctx` (Ollama's name for
  `ctx_size`) reaches the load; the others stay out, as on an OpenAI body.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from juggler.errors import BadRequest, NotImplementedParam
from juggler.router.core.load_options import LOAD_OPTIONS
from juggler.router.core.modelfiles import OPENAI_SAMPLING as _SAMPLING

#: keep_alive < 0: never unloaded for being idle (ten years is never, for a server).
KEEP_S = 10 * 365 * 86400

_ENGINE_FLAGS = {"num_batch": "--batch-size", "num_thread": "--threads"}
#: Options accepted only at the value that means "what Juggler does anyway".
_NEUTRAL: dict[str, Any] = {
    "mirostat": 0,
    "typical_p": 1.0,
    "tfs_z": 1.0,
    "numa": False,
    "low_vram": False,
    "f16_kv": True,
    "logits_all": False,
    "vocab_only": False,
    "use_mmap": True,
    "use_mlock": False,
    "embedding_only": False,
    "main_gpu": 0,
    "penalize_newline": False,
}


@dataclass(frozen=True)
class OllamaRequestOptions:
    """One request's `options` and `keep_alive`, as Juggler applies them."""

    #: OpenAI sampling fields for the backend body (`num_predict` -> `max_tokens`, ...).
    sampling: Mapping[str, Any] = field(default_factory=dict)
    #: Load options the model must run with (`num_ctx` -> `ctx_size`, ...): a model that
    #: runs with others is loaded again with these (`residency.ensure_options`).
    load: Mapping[str, Any] = field(default_factory=dict)
    #: keep_alive in seconds (negative: keep the model loaded); None when not given.
    keep_alive_s: float | None = None

    @classmethod
    def read(
        cls, options: dict[str, Any] | None, keep_alive: float | str | None
    ) -> OllamaRequestOptions:
        """Raises BadRequest naming an option Juggler cannot honour, or keep_alive."""
        sampling, load = split_options(without_load_options(options))
        keep = None if keep_alive is None else parse_keep_alive(keep_alive)
        return cls(sampling, load, keep)

    @property
    def unloads(self) -> bool:
        """keep_alive 0: the model is unloaded (at once, on a load-only request)."""
        return self.keep_alive_s == 0

    def residency(self) -> dict[str, Any]:
        """keep_alive as the model's residency options once the request is done (none
        when keep_alive was not given)."""
        return {} if self.keep_alive_s is None else keep_alive_options(self.keep_alive_s)

    def refuse_sampling(self, why: str) -> None:
        """400 naming the first sampling option, where nothing samples (embeddings)."""
        if self.sampling:
            raise NotImplementedParam(f"options.{next(iter(self.sampling))}", why)


# -- keep_alive --------------------------------------------------------------------------
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


#: A keep_alive longer than this (a year) keeps the model loaded, as a negative one does.
MAX_KEEP_ALIVE_S = 365 * 24 * 3600.0


def parse_keep_alive(value: float | str) -> float:
    """Seconds; negative means "keep". Numbers are seconds, strings Go durations; more
    than a year is "keep" too (issue 27: 10^22 hours is no timer). Raises BadRequest
    naming keep_alive (a non-finite number too)."""
    seconds = _keep_alive_seconds(value)
    if not math.isfinite(seconds):
        raise BadRequest(f"keep_alive: {value!r} is not a finite duration", param="keep_alive")
    return -1.0 if seconds > MAX_KEEP_ALIVE_S else seconds


def _keep_alive_seconds(value: float | str) -> float:
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _DURATION.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise BadRequest(
            f"keep_alive: {value!r} is not a duration like 5m or 1h30m", param="keep_alive"
        )
    return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)


def keep_alive_options(seconds: float) -> dict[str, Any]:
    """keep_alive as per-model residency options (seed 002's idle eviction)."""
    if seconds < 0:
        return {"auto_evict": False, "evict_idle_timeout": KEEP_S, "downsize_idle_timeout": KEEP_S}
    whole = math.ceil(seconds)  # the idle timeouts are whole seconds (Lemonade's)
    return {
        "auto_evict": True,
        "evict_idle_timeout": whole,
        "downsize_idle_timeout": min(whole, 60),
    }


# -- options ---------------------------------------------------------------------------------
def without_load_options(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """Ollama's `options` without Lemonade's load options: Lemonade's Ollama routes let a
    client put them there too and forward only `num_ctx` (Ollama's name for `ctx_size`,
    which keeps its own meaning) to the load; the rest stay out, as on an OpenAI body."""
    if not options:
        return options
    return {k: v for k, v in options.items() if k not in LOAD_OPTIONS or k == "ctx_size"}


def split_options(options: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ollama `options` -> (OpenAI sampling fields, Juggler load options). Raises
    NotImplementedParam (400) for an option Juggler cannot honour."""
    sampling: dict[str, Any] = {}
    load: dict[str, Any] = {}
    flags: list[str] = []
    for key, value in (options or {}).items():
        if value is None:
            continue
        if key in _SAMPLING:
            if key == "num_predict":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise BadRequest(
                        "options.num_predict must be an integer", param="options.num_predict"
                    )
                if value < 0:  # -1 infinite, -2 fill the context: no limit of our own
                    continue
            sampling[_SAMPLING[key]] = value
        elif key == "num_ctx":
            load["ctx_size"] = value
        elif key in _ENGINE_FLAGS:
            flags += [_ENGINE_FLAGS[key], str(value)]
        elif key == "num_gpu":
            if not isinstance(value, int) or isinstance(value, bool) or value < -1:
                raise BadRequest(
                    "options.num_gpu must be a whole number of layers (-1: as many as fit)",
                    param="options.num_gpu",
                )
            load["n_gpu_layers"] = value
        elif key in _NEUTRAL and value == _NEUTRAL[key]:
            continue
        else:
            raise NotImplementedParam(f"options.{key}", "Juggler cannot honour this option")
    if flags:
        load["llamacpp_args"] = " ".join(flags)
    return sampling, load


def merge_engine_args(current: str, extra: str) -> str:
    """`current` llamacpp_args with the flags in `extra` replacing their old values."""
    extra_tokens = shlex.split(extra)
    names = set(extra_tokens[::2])
    tokens = shlex.split(current)
    kept: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] in names:
            i += 2
            continue
        kept.append(tokens[i])
        i += 1
    return shlex.join([*kept, *extra_tokens])
