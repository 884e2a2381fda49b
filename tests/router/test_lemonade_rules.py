"""Issue 24, item 6: the pure rules behind Lemonade's contract (reference/lemonade/)."""

from __future__ import annotations

from juggler.router import load_options


def test_split_takes_load_options_out_and_keeps_only_ctx_size_for_the_auto_load() -> None:
    """Lemonade's server: "Keep this an explicit allowlist so request-scoped fields do not
    leak into recipe options" (only `ctx_size`); the others are `/load`'s, not the
    request's, so they do not reach the backend either."""
    raw = {
        "model": "m",
        "messages": [],
        "temperature": 0.5,
        "pinned": True,
        "ctx_size": 2048,
        "llamacpp_args": "--foo",
        "auto_evict": True,
        "save_options": True,
    }
    body, auto_load = load_options.split(raw)
    assert body == {"model": "m", "messages": [], "temperature": 0.5}
    assert auto_load == {"ctx_size": 2048}
    assert load_options.split({"model": "m", "ctx_size": None}) == ({"model": "m"}, {})
