"""Lemonade's load options on an inference body: which reach the auto-load.

Lemonade lets a client put `/api/v1/load`'s options (`pinned`, `ctx_size`,
`llamacpp_args`, ...) beside the request itself, and serves the request; its server keeps
"an explicit allowlist so request-scoped fields do not leak into recipe options": only
`ctx_size` is forwarded to the load that the request triggers when its model is not
loaded; every other load option stays out of the model's options (they belong to
`/api/v1/load`). The load options never reach the backend either: they are not
generation parameters.

Ollama's `options` may carry them as well (`ollama/options.py`): there `num_ctx` is the
one that reaches the load.

Pure: the route reads the body, `split` takes the load options out, and the router
validates what reaches the load like a `/load` body's (a bad `ctx_size` is a 400 naming
it) before anything is queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Lemonade's `/api/v1/load` options a client may send on an inference body.
LOAD_OPTIONS = frozenset(
    {
        "pinned",
        "save_options",
        "ctx_size",
        "llamacpp_backend",
        "llamacpp_args",
        "merge_args",
        "auto_evict",
        "downsize_idle_timeout",
        "evict_idle_timeout",
        "evict_weight_factor",
    }
)
#: The ones Lemonade forwards to the auto-load (server.cpp's `extract_auto_load_options`).
AUTO_LOAD_ALLOWLIST = ("ctx_size",)


def split(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body without Lemonade's load options, and the options the auto-load takes."""
    body = {k: v for k, v in raw.items() if k not in LOAD_OPTIONS}
    auto_load = {k: raw[k] for k in AUTO_LOAD_ALLOWLIST if raw.get(k) is not None}
    return body, auto_load
