"""Engine flags as text: a client's `llamacpp_args` parsed into `EngineFlags` values (a
400 naming the flag when it is wrong), layered over the server-wide flags (lemonade.md's
`merge_args`), and the helpers the backend's argparse is built with (`field_type`, and
`options.flag_of`)."""

from __future__ import annotations

import shlex
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from juggler.errors import BadRequest
from juggler.kv_cache import is_quantized
from juggler.options import EngineFlags, flag_of

#: Flags a client may not pass in `llamacpp_args`: they have their own load option.
OWNED_FLAGS: dict[str, str] = {
    "ctx_size": "ctx_size",
    "kv_cells": "kv_cells",
    "n_gpu_layers": "n_gpu_layers",
    "cache_type_k": "cache_type_k",
    "cache_type_v": "cache_type_v",
}
#: llama-server's switches (no value) and the engine flag value each one sets.
SWITCH_FLAGS: dict[str, tuple[str, str]] = {"--no-mmap": ("mmap", "off")}
#: llama-server flags accepted only at the value that is what Juggler does anyway (they
#: change nothing, so no engine flag carries them), with what Juggler does.
NEUTRAL_FLAGS: dict[str, tuple[str, str]] = {}


def field_type(info: FieldInfo) -> tuple[type, tuple[str, ...] | None]:
    """The scalar type of a flag and, for a Literal, its choices (for argparse)."""
    ann: Any = info.annotation
    if get_origin(ann) in (Union, types.UnionType):
        ann = next(a for a in get_args(ann) if a is not type(None))
    if get_origin(ann) is Literal:
        return str, tuple(str(a) for a in get_args(ann))
    return ann, None


def parse_llamacpp_args(text: str) -> dict[str, Any]:
    """Parse a client's `llamacpp_args` into engine flag values; raises BadRequest naming
    the flag (unclosed quote, unknown flag, missing or bad value, a flag that has its own
    load option). Pure: nothing is started."""
    values = {key: value for key, _, value in _groups(text) if key not in NEUTRAL_FLAGS}
    try:
        checked = EngineFlags.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        raise BadRequest(
            f"llamacpp_args: {flag_of(name)}: {err['msg']}", param="llamacpp_args"
        ) from None
    return {k: getattr(checked, k) for k in values}


def check_kv_cache(cache_type_v: str, llamacpp_args: str) -> None:
    """llama.cpp keeps a quantized V cache only with flash attention ("quantized V cache
    requires flash_attn to be enabled"): a 400 naming `cache_type_v` when the engine
    flags turn it off. Raises BadRequest as `parse_llamacpp_args` too."""
    flags = parse_llamacpp_args(llamacpp_args)
    if is_quantized(cache_type_v) and flags.get("flash_attn") == "off":
        raise BadRequest(
            f"cache_type_v {cache_type_v!r} needs flash attention, which llamacpp_args turn "
            "off (--flash-attn off); use --flash-attn auto or on, or cache_type_v 'f16'",
            param="cache_type_v",
        )


def merge_llamacpp_args(high: str, low: str) -> str:
    """Lemonade's `merge_custom_args`: the flags of `low` that `high` does not set, then
    `high`'s. A flag and its negation are one setting (`--no-mmap` and `--mmap off`), as
    are `--flag value` and `--flag=value`. Raises BadRequest as `parse_llamacpp_args`."""
    if not high.strip():
        return low
    if not low.strip():
        return high
    ours = _groups(high)
    set_here = {key for key, _, _ in ours}
    kept = [tokens for key, tokens, _ in _groups(low) if key not in set_here]
    return " ".join(shlex.join(tokens) for tokens in [*kept, *(t for _, t, _ in ours)])


def layered_llamacpp_args(
    server: str, model: str | None, request: str | None, *, merge: bool
) -> str:
    """lemonade.md's `merge_args`: "If true (default), backend/machine `*_args` are
    inherited; concrete request `*_args` replace model/architecture args while keeping
    backend args. If false, no inherited custom args [...] are applied". `server`: the
    server-wide flags (Settings), `model`: the model's saved ones, `request`: the load's
    own (None: not given; "" clears the model's). Lemonade's resolver: without merging only
    the request's flags count, even a saved model's are left out."""
    if not merge:
        return request or ""
    own = request if request is not None else model
    return merge_llamacpp_args(own or "", server)


def _groups(text: str) -> list[tuple[str, list[str], Any]]:
    """`text` as (setting, its tokens, its value) in order: the setting is an engine
    flag's field name (a switch's too) or a neutral flag; raises BadRequest naming a flag
    that is unknown, owned by a load option or lacks its value."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise BadRequest(f"llamacpp_args: {exc}", param="llamacpp_args") from None
    known = {flag_of(n): n for n in EngineFlags.model_fields}
    groups: list[tuple[str, list[str], Any]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, eq, inline = token.partition("=")
        if flag in NEUTRAL_FLAGS:
            end = _neutral(flag, inline if eq else None, tokens, i)
            groups.append((flag, tokens[i:end], None))
            i = end
            continue
        if token in SWITCH_FLAGS:
            switched, setting = SWITCH_FLAGS[token]
            groups.append((switched, [token], setting))
            i += 1
            continue
        name = known.get(flag)
        if name is None:
            choices = ", ".join(sorted(f for f, n in known.items() if n not in OWNED_FLAGS))
            raise BadRequest(
                f"llamacpp_args: unknown engine flag {token!r}; known flags: {choices}",
                param="llamacpp_args",
            )
        if name in OWNED_FLAGS:
            raise BadRequest(
                f"llamacpp_args: {flag} is set with the {OWNED_FLAGS[name]} option instead",
                param="llamacpp_args",
            )
        if eq:
            groups.append((name, [token], inline))
        elif i + 1 < len(tokens):
            groups.append((name, tokens[i : i + 2], tokens[i + 1]))
            i += 1
        else:
            raise BadRequest(f"llamacpp_args: {flag} needs a value", param="llamacpp_args")
        i += 1
    return groups


def _neutral(flag: str, inline: str | None, tokens: list[str], i: int) -> int:
    """Check a NEUTRAL_FLAGS flag's value; the index after it. Raises BadRequest."""
    value = inline if inline is not None else (tokens[i + 1] if i + 1 < len(tokens) else None)
    if value is None:
        raise BadRequest(f"llamacpp_args: {flag} needs a value", param="llamacpp_args")
    accepted, what = NEUTRAL_FLAGS[flag]
    if value != accepted:
        raise BadRequest(
            f"llamacpp_args: {flag} {value!r} is not supported: {what} ({flag} {accepted})",
            param="llamacpp_args",
        )
    return i + 1 if inline is not None else i + 2
