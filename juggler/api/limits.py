"""The configurable caps on the lists of a request body (issue 27: "input lists ...
capped (... configurable, documented)"): each cap is a `Limit`, a built-in default with
a setting name, `configure_limits` sets the values in force for this process, and
`capped` refuses a longer list before its items are checked. Shared by every face's
bodies (OpenAI, Ollama, Anthropic) and by the engine.
"""

from __future__ import annotations

from typing import Any

from pydantic import BeforeValidator


class Limit(int):
    """A cap on a list in a request body whose value is a setting (`name`): the int is
    the built-in default, `configure_limits` sets the value in force (issue 27: "input
    lists ... capped (... configurable, documented)")."""

    name: str

    def __new__(cls, name: str, default: int) -> Limit:
        limit = super().__new__(cls, default)
        limit.name = name
        return limit


#: The values in force, by setting name (`configure_limits`).
_IN_FORCE: dict[str, int] = {}


def configure_limits(**values: int) -> None:
    """Set the caps in force (`max_inputs`, `max_messages`) for this process."""
    _IN_FORCE.update(values)


def limit_value(limit: int) -> int:
    return _IN_FORCE.get(limit.name, int(limit)) if isinstance(limit, Limit) else limit


#: Most inputs in one embeddings request (OpenAI's limit), documents in one rerank, and
#: prompts in one completions request (issue 27: bounded before any work). Setting
#: `max_inputs`.
MAX_INPUTS = Limit("max_inputs", 2048)
#: Most messages in one chat request; a context holds far fewer (each costs tokens).
#: Setting `max_messages`.
MAX_MESSAGES = Limit("max_messages", 8192)


def capped(limit: int, what: str) -> Any:
    """A before-validator refusing a list longer than `limit` (a `Limit`: the value in
    force) before its items are checked, with a message that names the limit (issue 27:
    bounded before any work)."""

    def check(value: Any) -> Any:
        most = limit_value(limit)
        if isinstance(value, list) and len(value) > most:
            raise ValueError(f"at most {most} {what} in one request (got {len(value)})")
        return value

    return BeforeValidator(check)
